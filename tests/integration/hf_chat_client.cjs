// OpenAI's Node.js client against `illm serve` on a tiny Llama 3.1-style Hugging Face folder with the real Llama
// 3.1 chat template: a chat completion, the same streamed, and the models list with max_model_len.
const OpenAI = require(process.env.OPENAI_MODULE);

async function main() {
  const client = new OpenAI({ baseURL: process.env.ILLM_URL + "/v1", apiKey: "any-key", maxRetries: 0 });
  const models = await client.models.list();
  if (models.data[0].id !== "llama31-chat" || models.data[0].max_model_len !== 131072)
    throw new Error("models: " + JSON.stringify(models.data));
  const messages = JSON.parse(process.env.MESSAGES);
  const chat = await client.chat.completions.create({ model: "llama31-chat", messages, max_tokens: 12, temperature: 0 });
  let streamed = "";
  const stream = await client.chat.completions.create({
    model: "llama31-chat", messages, max_tokens: 12, temperature: 0, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  if (streamed !== chat.choices[0].message.content) throw new Error("stream: " + streamed);
  console.log(JSON.stringify({ content: chat.choices[0].message.content, usage: chat.usage,
                               finish: chat.choices[0].finish_reason }));
}

main().catch((e) => { console.error(e); process.exit(1); });
