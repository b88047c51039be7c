// Building the page's elements: every text from the user or a model goes in through textContent, never as markup.

const SVG = "http://www.w3.org/2000/svg";

export const $ = (selector) => document.querySelector(selector);

/** An element with attributes and, optionally, text (always as text). */
export function el(tag, attrs = {}, text) {
  return fill(document.createElement(tag), attrs, text);
}

/** An SVG element with attributes and, optionally, text. */
export function svgEl(tag, attrs = {}, text) {
  return fill(document.createElementNS(SVG, tag), attrs, text);
}

function fill(node, attrs, text) {
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}
