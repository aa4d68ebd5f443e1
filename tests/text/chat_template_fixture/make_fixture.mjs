// Renders real chat templates and a corpus of feature templates with @huggingface/jinja, the
// independent reference for pdserve's Jinja subset (engine/jinja). The C++ test renders the
// same inputs and must produce the same text, or fail where this one fails.
//
// Where @huggingface/jinja departs from Python's Jinja (which transformers uses) the corpus
// avoids the difference rather than encode it: printing non-strings (it prints `true`, Python
// `True`; none prints empty, Python `None`), `%` on negative numbers (JavaScript's sign),
// `capitalize` (it leaves the rest of the string as it is, Python lowercases it), the length of
// text beyond the BMP (it counts UTF-16 units, Python code points), and looking into an
// undefined value (it yields nothing, Python fails). tests/text/jinja_test.cc covers those
// with Python's results.
//
// Usage: node make_fixture.mjs NODE_MODULES_DIR OUT_DIR
// Reads OUT_DIR/<family>/tokenizer_config.json; writes OUT_DIR/cases.json.
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [nodeModules, outDir] = process.argv.slice(2);
const { Template } = await import(
  pathToFileURL(path.join(nodeModules, '@huggingface', 'jinja', 'dist', 'index.js')).href);

const families = ['qwen3', 'qwen2_5', 'llama3_1', 'gemma3', 'deepseek_v3'];

const conversations = [
  [{ role: 'user', content: 'Hello!' }],
  [{ role: 'system', content: 'You are a helpful assistant.' },
   { role: 'user', content: 'What is 2+2?' }],
  [{ role: 'system', content: 'Be brief.' },
   { role: 'user', content: 'Name a colour.' },
   { role: 'assistant', content: 'Blue.' },
   { role: 'user', content: 'Another one?' }],
  // Qwen3 splits an earlier answer's reasoning from its text.
  [{ role: 'user', content: 'Think first.' },
   { role: 'assistant', content: '<think>\nLet me see.\n</think>\n\nDone.' },
   { role: 'user', content: 'And now?' }],
  [{ role: 'user',
     content: 'Gr\u00fc\u00dfe \ud83d\udc4b \u2014 "quotes", \'single\', {{ braces }} {% tags %}\n\tnew line' }],
  [{ role: 'user', content: '  padded  \n\n' }],
  [{ role: 'user', content: '' }],
  // Roles that do not alternate: Gemma 3's template refuses them (raise_exception).
  [{ role: 'user', content: 'one' }, { role: 'user', content: 'two' }],
  [{ role: 'user', content: 'Weather?' },
   { role: 'assistant', content: 'Checking.' },
   { role: 'tool', content: '{"temp": 21}' },
   { role: 'user', content: 'Thanks' }],
  [{ role: 'system', content: 'first' }, { role: 'system', content: 'second' },
   { role: 'user', content: 'hi' }],
];

// Template variables as transformers (and pdserve's ChatTemplate) pass them.
function specialTokens(config) {
  const out = {};
  for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
    const v = config[key];
    if (typeof v === 'string') out[key] = v;
    else if (v && typeof v === 'object' && typeof v.content === 'string') out[key] = v.content;
  }
  return out;
}

function render(source, variables) {
  try {
    return { expected: new Template(source).render(variables) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

const chat = [];
for (const family of families) {
  const config = JSON.parse(
    fs.readFileSync(path.join(outDir, family, 'tokenizer_config.json'), 'utf8'));
  const source = config.chat_template;
  conversations.forEach((messages, index) => {
    for (const addGenerationPrompt of [true, false]) {
      const extras = [{}];
      if (family === 'qwen3') extras.push({ enable_thinking: false });
      for (const extra of extras) {
        const variables = {
          messages, add_generation_prompt: addGenerationPrompt, tools: null, documents: null,
          ...specialTokens(config), ...extra,
        };
        chat.push({ family, conversation: index, add_generation_prompt: addGenerationPrompt,
                    extra, ...render(source, variables) });
      }
    }
  });
}

// Features real templates use, one at a time, each printing strings only.
const featureVariables = {
  items: [{ name: 'b', ok: true, n: 2 }, { name: 'a', ok: false, n: 1 },
          { name: 'c', ok: true, n: 3 }],
  text: '  Mixed Case text\twith\nlines  ',
  obj: { key: 'value', nested: { list: [1, 2, 'three'], flag: true, none: null } },
  unicode: 'h\u00e9llo w\u00f6rld \u4e16\u754c',
  emoji: 'smile \ud83d\ude00 and \ud83d\udc4b',
};
const features = [
  "{{ items | map(attribute='name') | join(', ') }}",
  "{{ items | selectattr('ok') | map(attribute='name') | join('|') }}",
  "{{ items | rejectattr('ok') | map(attribute='name') | first }}",
  "{{ items | length }} {{ text | length }} {{ unicode | length }}",
  "[{{ text | trim }}] [{{ text.strip() }}] [{{ text.lstrip() }}] [{{ text.rstrip() }}]",
  "{{ text.split() | join('/') }} {{ 'a,b,,c'.split(',') | join('/') }}",
  "{{ text | upper }} {{ text | lower }} {{ 'hello big world' | title }} {{ 'hello' | capitalize }}",
  "{{ unicode[::-1] }} {{ unicode[1:4] }} {{ unicode[-2:] }} {{ 'abcdef'[::2] }}",
  "{{ obj | tojson }}",
  "{{ obj | tojson(indent=2) }}",
  "{{ items | tojson(indent=4) }}",
  "{{ emoji[::-1] }} {{ emoji[6:] }}",
  "{{ unicode | tojson }} {{ emoji | tojson }} {{ 'tab\\tquote\"back\\\\slash\\u0001' | tojson }}",
  "{{ obj.nested.list | join(',') }} {{ obj['nested']['list'][2] }} {{ obj.key ~ '!' }}",
  "{% for k, v in obj.items() %}{{ k }};{% endfor %}",
  "{% for x in items %}{{ loop.index }}/{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}",
  "{% for x in items if x.ok %}{{ x.name }}{{ loop.index0 }}{% else %}none{% endfor %}",
  "{% for x in [] %}x{% else %}empty{% endfor %}",
  "{% set ns = namespace(total=0, names='') %}{% for x in items %}{% set ns.total = ns.total + x.n %}{% set ns.names = ns.names + x.name %}{% endfor %}{{ ns.names }}={{ ns.total }}",
  "{% macro tag(name, body='') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag('c', body='y') }}",
  "{% if obj.missing is defined %}yes{% else %}no{% endif %} {% if obj.nested.none is none %}none{% endif %} {% if obj.key is string %}str{% endif %}",
  "{% if 'val' in obj.key %}in{% endif %} {% if 'zzz' not in obj.key %}notin{% endif %} {% if 'key' in obj %}haskey{% endif %}",
  "{{ 'yes' if items | length > 2 else 'no' }} {{ 'a' if false else 'b' if true else 'c' }}",
  "{{ (7 // 2) ~ '' }} {{ (2 ** 8) ~ '' }} {{ (10 - 3 * 2) ~ '' }} {{ (items | length * 2) ~ '' }}",
  "  {% if true %}\n    indented\n  {% endif %}\nafter",
  "a {%- if true -%} b {%- endif -%} c\n{{- ' d ' -}}\n e",
  "{# comment #}x{#- stripped -#}   y\n{# own line #}\nz",
  "{% for m in items %}\n{{ m.name }}\n{% endfor %}\ndone",
  "{% if 'x'.startswith('x') and 'abc'.endswith('bc') %}both{% endif %}",
  "{{ raise_exception('refused: ' ~ obj.key) }}",
  "[{{ undefined_var }}]{% if undefined_var is not defined %}undefined{% endif %}",
];
const featureCases = features.map((source) => ({
  template: source, ...render(source, featureVariables),
}));

fs.writeFileSync(path.join(outDir, 'cases.json'), JSON.stringify({
  families, conversations, chat, feature_variables: featureVariables, features: featureCases,
}, null, 1));
console.log(`wrote ${chat.length} chat and ${featureCases.length} feature cases`);
