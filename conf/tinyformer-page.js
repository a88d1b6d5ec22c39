/* The book's own page behaviour (conf.py: html_js_files), each part working around one upstream gap.
 *
 * 1. A solution's title bar ("Solution to Exercise 1.4") toggles the solution wherever it is clicked.
 *    sphinx-togglebutton 0.4.5 makes the whole title clickable, but its handler knows only the title
 *    itself and its button's parts: a click on the "Exercise 1.4" link (or on a formula in the title)
 *    threw "button is not defined" and toggled nothing. Such a click now toggles the solution, as a
 *    click anywhere else on the bar does.
 * 2. sphinx-copybutton 0.5.2's buttons carry only a tooltip: each gets an accessible name.
 * 3. sphinx-togglebutton 0.4.5 names every button "Toggle hidden content": a solution's button is named
 *    for its exercise ("Show the solution to Exercise 6.7", "Hide ..." once open), any other for its title.
 * 4. The theme's skip link lands on <main>, whose first stop is the header's toolbar: it lands on the
 *    article, the text itself.
 * 5. A box that scrolls sideways (a wide table, equation, listing, output or figure on a phone) says so: it gets
 *    the class tinyformer-scrolls, and tinyformer-past-start / tinyformer-at-end as it is scrolled;
 *    conf/tinyformer.css fades out the edge that has more behind it. Phones hide scroll bars. Boxes are
 *    measured again when fonts arrive, since a formula set in them grows wider inside its box.
 */
(() => {
  "use strict";

  document.addEventListener(
    "click",
    (event) => {
      const title = event.target.closest(".toggle > .admonition-title");
      if (!title || event.target === title || event.target.closest(".toggle-button")) {
        return;
      }
      const button = title.querySelector(".toggle-button");
      if (!button) {
        return;
      }
      event.preventDefault();
      event.stopPropagation();
      button.click(); // bubbles to the title, whose handler toggles
    },
    true,
  );

  const nameCopyButtons = () => {
    for (const button of document.querySelectorAll("button.copybtn:not([aria-label])")) {
      button.setAttribute("aria-label", "Copy this code to the clipboard");
    }
  };
  const nameToggleButtons = () => {
    for (const button of document.querySelectorAll(".toggle > .admonition-title > button.toggle-button")) {
      const title = button.parentElement.textContent.replace(/\s+/g, " ").trim();
      const what = title.replace(/^Solution to/, "the solution to");
      const name = `${button.getAttribute("aria-expanded") === "true" ? "Hide" : "Show"} ${what}`;
      if (button.getAttribute("aria-label") !== name) {
        button.setAttribute("aria-label", name);
      }
    }
  };
  // sphinx-copybutton and sphinx-togglebutton add their buttons once the page has loaded; name them then,
  // and again as buttons are added or opened and closed (aria-expanded).
  window.addEventListener("load", () => {
    nameCopyButtons();
    nameToggleButtons();
    new MutationObserver(nameCopyButtons).observe(document.body, { childList: true, subtree: true });
    new MutationObserver(nameToggleButtons).observe(document.body, {
      subtree: true,
      attributeFilter: ["aria-expanded"],
    });
  });

  const skipToText = () => {
    const article = document.querySelector("main article.bd-article");
    const skip = document.querySelector(".skip-link a, a.skip-link"); // the theme's: a link in div.skip-link
    if (!article || !skip) {
      return;
    }
    article.id = article.id || "tinyformer-text";
    article.tabIndex = -1; // focusable by the link, not a stop of its own when tabbing
    skip.setAttribute("href", `#${article.id}`);
    skip.textContent = "Skip to the text";
  };

  const SCROLLERS = [
    "main pre",
    "main .pst-scrollable-table-container",
    "main .katex-html",
    "main .cell_output",
    "main .output",
    "main a.image-reference",
  ].join(", ");
  const markEdges = (box) => {
    const scrolls = box.scrollWidth > box.clientWidth + 1;
    box.classList.toggle("tinyformer-scrolls", scrolls);
    box.classList.toggle("tinyformer-past-start", scrolls && box.scrollLeft > 1);
    box.classList.toggle("tinyformer-at-end", scrolls && box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
  };
  const markAll = () => document.querySelectorAll(SCROLLERS).forEach(markEdges);
  const watchScrollers = () => {
    const resized = new ResizeObserver((entries) => entries.forEach((entry) => markEdges(entry.target)));
    for (const box of document.querySelectorAll(SCROLLERS)) {
      markEdges(box);
      resized.observe(box);
      box.addEventListener("scroll", () => markEdges(box), { passive: true });
    }
    // A formula grows wider when its fonts arrive, inside a box that keeps its width (no resize is
    // seen): every box is measured again once fonts or images have loaded.
    document.fonts.addEventListener("loadingdone", markAll);
    document.fonts.ready.then(markAll);
    window.addEventListener("load", markAll);
  };
  const ready = () => {
    watchScrollers();
    skipToText();
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }
})();
