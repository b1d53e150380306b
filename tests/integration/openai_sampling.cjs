// OpenAI's official Node.js client against `illm serve` on stories15M: log probabilities (completions and chat,
// whole and streamed) against the golden top-3 of an independent implementation, logit_bias, the penalties,
// top_k, min_tokens with stop_token_ids, seeds that repeat with penalties, n and best_of.
const fs = require("fs");
const OpenAI = require(process.env.OPENAI_MODULE);

const golden = JSON.parse(fs.readFileSync(process.env.GOLDEN, "utf8")).cases[0];  // "Once upon a time"
const client = new OpenAI({ baseURL: process.env.ILLM_URL + "/v1", apiKey: "any-key", maxRetries: 0 });
const model = "stories15M";
const prompt = golden.prompt;

function check(ok, what) {
  if (!ok) throw new Error(what);
}

/// The log-softmax values the golden run gives each of the first `n` steps (most likely first).
function goldenTop(n) {
  return golden.top3_logprobs.slice(0, n).map((step) => step.map(([, lp]) => lp));
}

async function completionLogprobs() {
  const r = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  check(lp.tokens.length === 8 && lp.token_logprobs.length === 8 && lp.text_offset.length === 8, "shape " + JSON.stringify(lp));
  check(lp.tokens.join("") === r.choices[0].text, "tokens join to the text");
  // As the engine's golden test: float order differs between the implementations, so the differences are
  // within 1e-3 on average and 1e-2 at worst.
  const want = goldenTop(8);
  let total = 0, worst = 0;
  for (let i = 0; i < 8; i++) {
    check(lp.tokens[i] === Object.keys(lp.top_logprobs[i]).reduce((a, b) => lp.top_logprobs[i][a] >= lp.top_logprobs[i][b] ? a : b),
      `step ${i}: the greedy token is the most likely`);
    const top = Object.values(lp.top_logprobs[i]).sort((a, b) => b - a);
    for (let k = 0; k < 3; k++) {
      const diff = Math.abs(top[k] - want[i][k]);
      total += diff;
      worst = Math.max(worst, diff);
    }
  }
  check(total / 24 <= 1e-3 && worst <= 1e-2, `top-3 log probabilities against the golden run: mean ${total / 24}, worst ${worst}`);
  return r;
}

async function chatLogprobs() {
  const ask = { model, messages: [{ role: "user", content: prompt }], max_tokens: 12, temperature: 0, logprobs: true,
    top_logprobs: 2 };
  const whole = await client.chat.completions.create(ask);
  const content = whole.choices[0].logprobs.content;
  check(content.length === 12 && content.every((t) => t.top_logprobs.length === 2), "chat shape");
  check(content.map((t) => t.token).join("") === whole.choices[0].message.content, "chat tokens join to the text");
  check(content.every((t) => Buffer.from(t.bytes).toString("utf8") === t.token), "bytes");
  const streamed = [];
  for await (const chunk of await client.chat.completions.create({ ...ask, stream: true }))
    streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  check(JSON.stringify(streamed) === JSON.stringify(content), "streamed logprobs: " + JSON.stringify(streamed));
}

/// Where each token's text starts in the choice's text, in UTF-8 bytes (the service's text_offset).
function byteOffsets(tokens) {
  let at = 0;
  return tokens.map((t) => { const o = at; at += Buffer.byteLength(t, "utf8"); return o; });
}

/// text_offset on a text of characters beyond ASCII: a token of an accented letter counts its two bytes.
async function offsetsBeyondAscii() {
  const text = "Lily saw a café and a naïve fiancé.";
  const r = await client.completions.create({ model, prompt: text, echo: true, logprobs: 0, max_tokens: 2,
    temperature: 0 });
  const lp = r.choices[0].logprobs;
  check(lp.tokens.every((t) => !t.includes("\ufffd")), "whole characters in each token: " + JSON.stringify(lp.tokens));
  check(r.choices[0].text.includes(text) && r.choices[0].text === lp.tokens.join(""), "echo: " + r.choices[0].text);
  check(JSON.stringify(lp.text_offset) === JSON.stringify(byteOffsets(lp.tokens)),
    "text_offset beyond ASCII: " + JSON.stringify(lp.text_offset));
  check(lp.text_offset[lp.text_offset.length - 1] > lp.tokens.slice(0, -1).join("").length, "bytes, not characters");
}

/// lm-evaluation-harness's loglikelihood request: the golden prompt and its first 8 greedy tokens as ids, echoed
/// with their log probabilities; those of the 8 are the golden run's.
async function echoLoglikelihood() {
  const prompt = [...golden.prompt_token_ids, ...golden.output_token_ids.slice(0, 8)];
  const r = await client.completions.create({ model, prompt, echo: true, logprobs: 1, max_tokens: 1, temperature: 0 });
  const lp = r.choices[0].logprobs, n = golden.prompt_token_ids.length;
  check(lp.token_logprobs.length === prompt.length + 1 && lp.token_logprobs[0] === null && lp.top_logprobs[0] === null,
    "echo shape " + JSON.stringify(lp));
  check(r.choices[0].text === lp.tokens.join(""), "the echoed text is the tokens' texts");
  check(JSON.stringify(lp.text_offset) === JSON.stringify(byteOffsets(lp.tokens)), "text_offset");
  for (let k = 0; k < 8; k++) {
    const got = lp.token_logprobs[n + k], want = golden.top3_logprobs[k][0][1];
    check(Math.abs(got - want) < 1e-2, `echoed step ${k}: ${got} vs ${want}`);
  }
  check(lp.token_logprobs[prompt.length] === Math.max(...Object.values(lp.top_logprobs[prompt.length])),
    "the output token is the greedy one");
  let streamed = "";
  for await (const chunk of await client.completions.create({ model, prompt, echo: true, max_tokens: 3, temperature: 0,
    stream: true })) streamed += chunk.choices[0]?.text ?? "";
  check(streamed.startsWith(lp.tokens.slice(0, prompt.length).join("")), "a stream echoes the prompt first");
}

async function ids(body) {
  const r = await client.completions.create({ model, prompt, temperature: 0, return_token_ids: true, ...body });
  return r.choices[0];
}

async function biasAndPenalties() {
  const greedy = (await ids({ max_tokens: 24 })).token_ids;
  const first = golden.output_token_ids[0];
  check(greedy[0] === first, "greedy starts as the golden run");
  const banned = (await ids({ max_tokens: 4, logit_bias: { [first]: -100 } })).token_ids;
  check(banned[0] !== first, "logit_bias -100 bars the greedy token");
  const forced = (await ids({ max_tokens: 4, logit_bias: { 450: 100 } })).token_ids;
  check(forced.every((t) => t === 450), "logit_bias +100 forces a token: " + forced);
  const repeats = (tokens) => tokens.length - new Set(tokens).size;
  const penalised = (await ids({ max_tokens: 24, frequency_penalty: 2, presence_penalty: 2 })).token_ids;
  check(repeats(penalised) < repeats(greedy), `penalties repeat less: ${repeats(penalised)} vs ${repeats(greedy)}`);
  const repetition = (await ids({ max_tokens: 24, repetition_penalty: 1.8 })).token_ids;
  check(JSON.stringify(repetition) !== JSON.stringify(greedy), "repetition_penalty changes the greedy output");
  const topk1 = (await ids({ max_tokens: 24, temperature: 1.5, top_k: 1, seed: 3 })).token_ids;
  check(JSON.stringify(topk1) === JSON.stringify(greedy), "top_k 1 samples the greedy output");
}

async function stopsAndMinTokens() {
  const period = 29889;  // "."
  const stopped = await ids({ max_tokens: 40, stop_token_ids: [period], ignore_eos: true });
  check(stopped.finish_reason === "stop" && !stopped.token_ids.includes(period), "stop_token_ids end it (with ignore_eos)");
  const atLeast = await ids({ max_tokens: 40, stop_token_ids: [period], min_tokens: stopped.token_ids.length + 5 });
  check(atLeast.token_ids.length >= stopped.token_ids.length + 5, "min_tokens holds the stop ids back");
}

async function seeds() {
  const ask = { max_tokens: 24, temperature: 1.0, seed: 42, presence_penalty: 0.5, frequency_penalty: 0.5,
    logit_bias: { 263: 2 }, top_k: 50, min_p: 0.02, logprobs: 1 };
  const a = await ids(ask), b = await ids(ask), c = await ids({ ...ask, seed: 43 });
  check(JSON.stringify(a.token_ids) === JSON.stringify(b.token_ids), "a seed repeats with penalties");
  // Equal up to float order: a block the placement moved between the runs is attended where it lies and merged.
  check(a.logprobs.token_logprobs.every((x, i) => Math.abs(x - b.logprobs.token_logprobs[i]) < 1e-4),
    "and so do its log probabilities");
  check(JSON.stringify(a.token_ids) !== JSON.stringify(c.token_ids), "another seed samples otherwise");
  // Without a seed each request draws one from the operating system's randomness: three unseeded requests at
  // temperature 1.5 over 24 tokens do not all sample alike (the same sampling stream would repeat the answer).
  const free = { max_tokens: 24, temperature: 1.5 };
  const u = [await ids(free), await ids(free), await ids(free)].map((r) => JSON.stringify(r.token_ids));
  check(new Set(u).size > 1, "unseeded requests repeat one answer: " + u[0]);
}

/// response_format json_object and json_schema: every output parses, and keeps the schema.
async function structuredOutputs() {
  const schema = { type: "object", properties: { mood: { enum: ["happy", "sad"] }, ok: { type: "boolean" },
    pets: { type: "array", items: { type: "null" }, maxItems: 2 } }, required: ["mood", "ok"],
    additionalProperties: false };
  for (const [temperature, seed] of [[0, 1], [1, 2], [1, 3]]) {
    const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }],
      max_tokens: 64, temperature, seed, response_format: { type: "json_schema", json_schema: { name: "m", schema } } });
    const out = JSON.parse(r.choices[0].message.content);
    check(["happy", "sad"].includes(out.mood) && typeof out.ok === "boolean" && r.choices[0].finish_reason === "stop",
      "json_schema: " + r.choices[0].message.content);
  }
  const any = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }],
    max_tokens: 48, temperature: 0, response_format: { type: "json_object" } });
  const text = any.choices[0].message.content;
  // Its budget closes the object in time: it ends whole (stop) and parses, an object.
  check(any.choices[0].finish_reason === "stop", "json_object: " + any.choices[0].finish_reason + " " + text);
  const parsed = JSON.parse(text);
  check(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed), "json_object: " + text);
  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }], max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "p", schema: { type: "string", pattern: "a+" } } } });
    throw new Error("a schema with a pattern was accepted");
  } catch (e) {
    if (!(e instanceof OpenAI.BadRequestError) || e.param !== "response_format" || !e.message.includes("pattern")) throw e;
  }
}

/// n choices, each with a sampling stream of its own that a seed repeats, whole and streamed; best_of returns the
/// likeliest; usage counts every choice generated.
async function choices() {
  const ask = { model, prompt, max_tokens: 10, temperature: 1.0, seed: 7, n: 3, ignore_eos: true };
  const a = await client.completions.create(ask), b = await client.completions.create(ask);
  const texts = a.choices.map((c) => c.text);
  check(a.choices.length === 3 && a.choices.every((c, i) => c.index === i), "n = 3: " + JSON.stringify(a.choices));
  check(new Set(texts).size > 1, "the choices sample apart: " + JSON.stringify(texts));
  check(JSON.stringify(texts) === JSON.stringify(b.choices.map((c) => c.text)), "a seed repeats every choice");
  check(a.usage.completion_tokens === 30 && a.usage.prompt_tokens === b.usage.prompt_tokens, "usage: " + JSON.stringify(a.usage));
  const streamed = ["", "", ""];
  for await (const chunk of await client.completions.create({ ...ask, stream: true }))
    for (const c of chunk.choices) streamed[c.index] += c.text;
  check(JSON.stringify(streamed) === JSON.stringify(texts), "streamed choices: " + JSON.stringify(streamed));
  const best = await client.completions.create({ ...ask, n: 1, best_of: 3, logprobs: 0 });
  const scored = await client.completions.create({ ...ask, logprobs: 0 });
  const sums = scored.choices.map((c) => c.logprobs.token_logprobs.reduce((x, y) => x + y, 0));
  check(best.choices.length === 1 && best.choices[0].text === texts[sums.indexOf(Math.max(...sums))],
    "best_of 3 returns the likeliest of the three: " + best.choices[0].text);
  check(best.usage.completion_tokens === 30, "best_of usage counts all three: " + JSON.stringify(best.usage));
  const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }],
    max_tokens: 6, temperature: 1.0, seed: 7, n: 2 });
  check(chat.choices.length === 2 && chat.choices[1].index === 1, "chat n = 2");
}

async function refusals() {
  for (const [body, param] of [[{ logit_bias: { 99999: 1 } }, "logit_bias"], [{ logprobs: 50 }, "logprobs"],
    [{ presence_penalty: 3 }, "presence_penalty"], [{ n: 17 }, "n"], [{ n: 3, best_of: 2 }, "best_of"],
    [{ best_of: 2, stream: true }, "best_of"]]) {
    try {
      await client.completions.create({ model, prompt, max_tokens: 2, ...body });
      throw new Error(`${param} out of range was accepted`);
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError) || e.param !== param) throw e;
    }
  }
}

async function main() {
  await completionLogprobs();
  await chatLogprobs();
  await echoLoglikelihood();
  await offsetsBeyondAscii();
  await biasAndPenalties();
  await stopsAndMinTokens();
  await seeds();
  await structuredOutputs();
  await choices();
  await refusals();
  console.log("openai client: logprobs (against the golden top-3), echo, logit_bias, penalties, top_k, min_tokens, " +
    "stop_token_ids, seeds, structured outputs, n and best_of, and refusals: ok");
}

main().catch((e) => { console.error(e); process.exit(1); });
