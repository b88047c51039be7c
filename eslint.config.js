// ESLint for the demo page's ES modules (service/demo/static): the recommended rules, in a browser.
import js from "@eslint/js";
import globals from "globals";

export default [
  js.configs.recommended,
  {
    files: ["service/demo/static/**/*.js"],
    languageOptions: {
      sourceType: "module",
      globals: globals.browser,
    },
  },
];
