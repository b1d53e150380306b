// OpenAI's Node.js client calling tools on `illm serve` (a tiny random checkpoint with a real chat template): a
// named function and tool_choice required give one call whose arguments validate, whole and streamed (the deltas
// joined by index give the same call); auto answers in the chat shape; a conversation with the assistant's call
// and the tool's answer goes on. SYNTAX says which template serves (llama31 or qwen), only for the log.
const OpenAI = require(process.env.OPENAI_MODULE);

const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Oslo", "Lima"] },
                                                 unit: { type: "string", enum: ["C", "F"] } },
                  required: ["city"], additionalProperties: false } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } },
];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

function check(ok, what) { if (!ok) throw new Error(what); }

/// The calls of a streamed answer: deltas joined by index, and the finish reason.
async function streamed(client, body) {
  const calls = [];
  let finish = null, content = "";
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? "";
    for (const d of choice.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      if (d.id) calls[d.index].id = d.id;
      calls[d.index].function.name += d.function?.name ?? "";
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
    finish = choice.finish_reason ?? finish;
  }
  return { calls, finish, content };
}

/// A call that names a tool and carries arguments its schema accepts.
function valid(call) {
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === "get_weather")
    return ["Paris", "Oslo", "Lima"].includes(args.city) && Object.keys(args).every((k) => k === "city" || k === "unit");
  return call.function.name === "get_time" && typeof args === "object";
}

async function main() {
  const client = new OpenAI({ baseURL: process.env.ILLM_URL + "/v1", apiKey: "any-key", maxRetries: 0 });
  const model = process.env.MODEL;
  const report = {};
  for (const [name, choice] of [["named", { type: "function", function: { name: "get_weather" } }],
                                ["required", "required"]]) {
    const body = { model, messages, tools, tool_choice: choice, max_tokens: 48, temperature: 0 };
    const whole = await client.chat.completions.create(body);
    const c = whole.choices[0];
    check(c.finish_reason === "tool_calls", `${name}: finish ${c.finish_reason}: ${JSON.stringify(c.message)}`);
    check(c.message.tool_calls.length === 1 && valid(c.message.tool_calls[0]), `${name}: ${JSON.stringify(c.message)}`);
    check(name !== "named" || c.message.tool_calls[0].function.name === "get_weather", `${name}: not get_weather`);
    const s = await streamed(client, body);
    check(s.finish === "tool_calls" && s.calls.length === 1, `${name} streamed: ${JSON.stringify(s)}`);
    check(s.calls[0].function.name === c.message.tool_calls[0].function.name &&
          s.calls[0].function.arguments === c.message.tool_calls[0].function.arguments, `${name} streamed differs`);
    report[name] = c.message.tool_calls[0].function;
  }
  // auto: the model decides. Its finish reason says what it did: tool_calls exactly when there are calls (each valid),
  // else stop before the budget or length at it, with the text as content.
  const auto = await client.chat.completions.create({ model, messages, tools, max_tokens: 16, temperature: 0 });
  const a = auto.choices[0], calls = a.message.tool_calls ?? [];
  check(calls.length > 0 ? a.finish_reason === "tool_calls" : ["stop", "length"].includes(a.finish_reason),
        "auto: finish " + JSON.stringify(auto));
  check(calls.every(valid), "auto: a call that does not validate");
  check(a.finish_reason !== "length" || auto.usage.completion_tokens === 16, "auto: length before the budget");
  check(a.finish_reason !== "stop" || auto.usage.completion_tokens <= 16, "auto: stop past the budget");
  check(calls.length > 0 || typeof a.message.content === "string", "auto: no calls and no content");
  report.auto = a.finish_reason;
  // The call and its answer go back to the model.
  const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } };
  const next = await client.chat.completions.create({
    model, tools, max_tokens: 8, temperature: 0,
    messages: [...messages, { role: "assistant", content: null, tool_calls: [call] },
               { role: "tool", tool_call_id: "call_1", content: '{"temperature": 21}' }] });
  check(next.choices[0].message.role === "assistant", "a turn after the tool's answer");
  report.after_tool = next.usage.prompt_tokens;
  console.log(JSON.stringify(report));
}

main().catch((e) => { console.error(e); process.exit(1); });
