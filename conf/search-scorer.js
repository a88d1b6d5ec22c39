/* tinyformer's search scorer (conf.py: html_search_scorer, Sphinx's supported hook for ranking).

   Sphinx's default gives an object whose last dotted name part matches the query 6 points plus 5 for
   its priority, while a page whose text holds the word gets at most 5: searching "head" put 16 API
   entries above every chapter. Here the chapters and reference pages come first (page titles and
   section titles above body text), API entries after them, and index entries of the glossary (each
   glossary term is also an index entry pointing at the glossary page, so the page appeared twice)
   last, where the de-duplication of equal results removes none of them. */
var Scorer = {
  score: (result) => {
    const [docname, title, anchor, descr, score, filename, kind] = result;
    // Pages first, whole-page title matches highest; API objects below every page.
    if (kind === "object") return score - 100;
    if (kind === "index" && docname === "glossary") return score - 200;
    if (kind === "title") return score + 50;
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
