// The reference tokenizer (@huggingface/tokenizers) on each line of a file, as `memtrain tokenize` prints:
//   node tokenizer_reference.mjs NODE_MODULES TOKENIZER_DIR FILE [--add-special-tokens] [--decode] [--time]
// TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json. The file is read as UTF-8 into JavaScript
// strings (ill-formed bytes become U+FFFD). --decode prints [ids, decode(ids)] per line instead of ids.
// --time prints only the seconds the encoding took, and the bytes encoded.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [modules, dir, file, ...flags] = process.argv.slice(2);
const { Tokenizer } = await import(
  pathToFileURL(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
const add_special_tokens = flags.includes("--add-special-tokens");
const text = fs.readFileSync(file, "utf8");
const lines = text.split("\n");
if (text.endsWith("\n")) lines.pop();
if (flags.includes("--time")) {
  const start = process.hrtime.bigint();
  for (const line of lines) tok.encode(line, { add_special_tokens });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ seconds, bytes: fs.statSync(file).size }));
} else {
  const out = lines.map((line) => {
    const ids = tok.encode(line, { add_special_tokens }).ids;
    if (!flags.includes("--decode")) return JSON.stringify(ids);
    return JSON.stringify([ids, ids.length ? tok.decode(ids) : ""]);  // decode refuses no ids
  });
  fs.writeSync(1, out.join("\n") + (out.length ? "\n" : ""));
}
