// Text from outside (a kid, a User-Agent, a title, a claim) shown as it is, but inert: a
// bidirectional formatting character in it (U+061C, U+200E–U+200F, U+202A–U+202E,
// U+2066–U+2069) would reorder the text around it, so that "safe" reads "efas" and a date
// runs backwards. Each is written escaped, as the command line writes control characters.
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;

function inert(text) {
  return String(text).replace(BIDI_CONTROLS, (c) => "\\u{" + c.codePointAt(0).toString(16) + "}");
}
