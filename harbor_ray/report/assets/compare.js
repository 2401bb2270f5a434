// The comparison page's plots, drawn from the embedded document (the tables are HTML
// already). Captions and titles are written with textContent, never as HTML.
"use strict";

(function () {
  const doc = JSON.parse(document.getElementById("compare-data").textContent);
  const section = document.getElementById("plots");
  for (const plot of doc.plots) {
    const box = document.createElement("div");
    box.className = "plot";
    box.id = "plot-" + plot.id;
    const heading = document.createElement("h2");
    heading.textContent = plot.title;
    const caption = document.createElement("p");
    caption.className = "caption";
    caption.textContent = plot.caption;
    const figure = document.createElement("div");
    figure.className = "figure";
    box.append(heading, caption, figure);
    section.append(box);
    Plotly.newPlot(figure, plot.figure.data, plot.figure.layout,
      { responsive: true, displaylogo: false });
  }
  window.harborCompare = doc;
})();
