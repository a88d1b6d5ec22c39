"""Data that ships with the library: ``hamlet.txt``, chapter 6's corpus
(see ``README.md`` beside it for its source and licences)."""
