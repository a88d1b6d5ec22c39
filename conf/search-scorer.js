/* tinyformer's search scorer (conf.py: html_search_scorer, Sphinx's supported hook for ranking).

   Sphinx's default gives an object whose last dotted name part matches the query 6 points plus 5 for
   its priority, while a page whose text holds the word gets at most 5: searching "head" put 16 API
   entries above every chapter. Here every page result (title, section title, text, index entry) ranks
   above every API entry, and a page-title match above a section-title match above a text match. */
var Scorer = {
  score: (result) => {
    const [docname, title, anchor, descr, score, filename, kind] = result;
    if (kind === "object") return score - 1000;
    if (kind === "title") return score + 100;
    return score;
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
