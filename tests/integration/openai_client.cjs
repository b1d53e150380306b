// OpenAI's official Node.js client, unchanged (base URL + any key), against `illm serve`: completions,
// chat completions, both also streamed, and the models list.
const OpenAI = require(process.env.OPENAI_MODULE);

async function main() {
  const client = new OpenAI({ baseURL: process.env.ILLM_URL + "/v1", apiKey: "any-key", maxRetries: 0 });
  const models = await client.models.list();
  if (models.data[0].id !== "stories15M") throw new Error("models: " + JSON.stringify(models.data));

  const completion = await client.completions.create({
    model: "stories15M", prompt: "Once upon a time", max_tokens: 30, temperature: 0 });
  if (!completion.choices[0].text.includes("Lily")) throw new Error("completion: " + completion.choices[0].text);
  if (completion.usage.completion_tokens !== 30) throw new Error("usage: " + JSON.stringify(completion.usage));

  const chat = await client.chat.completions.create({
    model: "stories15M", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 20, temperature: 0 });
  if (!chat.choices[0].message.content.includes("Lily")) throw new Error("chat: " + chat.choices[0].message.content);

  let streamed = "";
  const stream = await client.chat.completions.create({
    model: "stories15M", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 20, temperature: 0,
    stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  if (streamed !== chat.choices[0].message.content) throw new Error("stream: " + streamed);

  let text = "";
  const completionStream = await client.completions.create({
    model: "stories15M", prompt: "Once upon a time", max_tokens: 30, temperature: 0, stream: true });
  for await (const chunk of completionStream) text += chunk.choices[0]?.text ?? "";
  if (text !== completion.choices[0].text) throw new Error("completion stream: " + text);

  try {
    await client.completions.create({ model: "stories15M", prompt: "hi", max_tokens: -1 });
    throw new Error("a negative max_tokens was accepted");
  } catch (e) {
    if (!(e instanceof OpenAI.BadRequestError)) throw e;
  }
  console.log("openai client: models, completions, chat, both streamed, and a 400: ok");
}

main().catch((e) => { console.error(e); process.exit(1); });
