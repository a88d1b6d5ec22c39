/* Search results a student can use: each page once, and snippets without theme chrome or raw TeX.

   1. Snippets. Sphinx 9 cuts each snippet from the page's element with role="main" (searchtools.js,
      htmlToText), removing only .headerlink, script and style. pydata-sphinx-theme puts role="main" on
      <main>, which also holds the article header (download menu, colour-mode switch: "System Settings
      Light Dark"), and a formula is KaTeX's typeset HTML plus a MathML copy, whose text read as
      glyph soup ("QKTQK^T"). htmlToText is wrapped to drop the theme's chrome and write each formula
      as its TeX source (the MathML copy's annotation), without delimiters.
   2. One result per page and place. Each glossary term is also an index entry of the glossary page,
      so a query found the glossary twice: as text and as an index entry. An index entry is dropped
      when its page is already a result.
   Sphinx has no option for either; drop this file if it gets them. Ranking: conf/search-scorer.js. */
"use strict";
(() => {
  if (typeof Search === "undefined" || !Search.htmlToText || !Search._performSearch) return;
  const CHROME = [
    ".bd-header-article", ".header-article-items", ".bd-footer-article", ".prev-next-footer",
    ".bd-footer-content", ".bd-sidebar-secondary", "#jb-print-docs-body", ".toggle-button",
    ".copybtn", "dialog", "button",
  ].join(",");
  const DELIMITERS = /\\\(|\\\)|\\\[|\\\]/g;

  const sphinxHtmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(CHROME).forEach((el) => el.remove());
    doc.querySelectorAll(".math").forEach((el) => {
      el.querySelectorAll(".eqno, .headerlink").forEach((part) => part.remove());
      const tex = el.querySelector('annotation[encoding="application/x-tex"]');
      const text = (tex ?? el).textContent.replace(DELIMITERS, " ").trim();
      el.replaceWith(doc.createTextNode(` ${text} `));
    });
    return sphinxHtmlToText(doc.documentElement.outerHTML, anchor).replace(/\s+/g, " ");
  };

  const sphinxPerformSearch = Search._performSearch;
  Search._performSearch = (...args) => {
    const results = sphinxPerformSearch(...args);
    // [docname, title, anchor, descr, score, filename, kind]
    const pages = new Set(results.filter((r) => r[6] === "text" || r[6] === "title").map((r) => r[0]));
    return results.filter((r) => r[6] !== "index" || !pages.has(r[0]));
  };
})();
