// node tokenizer_reference.mjs JS_PACKAGE CORPUS.json TOKENIZER_DIR...: Hugging Face's own JS tokenizers on each
// text of the corpus, for every tokenizer folder: {folder: [{special, plain, decoded}]}, where special and plain
// are the ids with and without the special tokens the tokenizer adds, and decoded is decode(plain).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [jsPackage, corpusPath, ...folders] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(join(jsPackage, "dist", "tokenizers.mjs")).href);
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const out = {};
for (const folder of folders) {
  const json = JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8"));
  const config = JSON.parse(readFileSync(join(folder, "tokenizer_config.json"), "utf8"));
  const tokenizer = new Tokenizer(json, config);
  out[folder] = corpus.map((text) => {
    const plain = tokenizer.encode(text, { add_special_tokens: false }).ids;
    return {
      special: tokenizer.encode(text, { add_special_tokens: true }).ids,
      plain,
      decoded: plain.length ? tokenizer.decode(plain, { skip_special_tokens: false }) : "",
    };
  });
}
process.stdout.write(JSON.stringify(out));
