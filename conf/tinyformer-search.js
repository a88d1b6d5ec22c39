/* Search result snippets without the theme's buttons or raw TeX.

   Sphinx 9 cuts each snippet from the page's element with role="main" (searchtools.js, htmlToText),
   removing only .headerlink, script and style. pydata-sphinx-theme puts role="main" on <main>, which
   also holds the article header (download menu, colour-mode switch: "System Settings Light Dark"),
   and a page's math is TeX in \( \) until MathJax typesets it, so snippets showed both. This wraps
   htmlToText to remove the theme's chrome and to write each formula as its TeX source without the
   delimiters. Sphinx has no option for the removal list; drop this if it gets one. */
"use strict";
(() => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const CHROME = [
    ".bd-header-article", ".header-article-items", ".bd-footer-article", ".prev-next-footer",
    ".bd-footer-content", ".bd-sidebar-secondary", "#jb-print-docs-body", ".toggle-button",
    ".copybtn", "dialog", "button",
  ];
  const sphinxHtmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(CHROME.join(",")).forEach((el) => el.remove());
    doc.querySelectorAll(".math").forEach((el) => {
      const tex = el.textContent.trim().replace(/^\\[([]|\\[)\]]$|^\$\$?|\$\$?$/g, "").trim();
      el.replaceWith(doc.createTextNode(` ${tex} `));
    });
    return sphinxHtmlToText(doc.documentElement.outerHTML, anchor).replace(/\s+/g, " ");
  };
})();
