// node openai_sdk.mjs URL DIR: OpenAI's own Node client (the openai package installed in DIR) against
// the server at URL. Prints one "ok: ..." line a check; the first failure is one "FAIL: ..." line
// on stderr and exit 1.
import { createRequire } from "module";
import { join } from "path";

const [url, dir] = process.argv.slice(2);
const { OpenAI } = createRequire(join(dir, "node_modules") + "/")("openai");
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30000 });

class Failed extends Error {}
const show = (v) => JSON.stringify(v);
function check(cond, what, got) {
  if (!cond) throw new Failed(`${what}; got ${show(got)}`);
}
const ok = (line) => console.log(`ok: ${line}`);
const greedy = { model: "dptrain", temperature: 0 };

async function completion(params) {
  const r = await client.completions.create({ ...greedy, ...params });
  check(r.object === "text_completion" && Array.isArray(r.choices) && r.usage, "want a text_completion with choices and usage", r);
  return r;
}
async function textOf(prompt, max_tokens) {
  const r = await completion({ prompt, max_tokens });
  check(r.choices.length === 1 && typeof r.choices[0].text === "string", `prompt ${show(prompt)}: want one choice of text`, r);
  return r.choices[0].text;
}
// refused(WHAT, FIELD, call): call() must throw the SDK's BadRequestError (400) whose param is FIELD,
// its message naming FIELD.
async function refused(what, field, call) {
  let r;
  try {
    r = await call();
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400,
          `${what}: want BadRequestError (400)`, { name: e?.constructor?.name, status: e?.status, message: e?.message });
    check(e.param === field && e.message.includes(field),
          `${what}: want error.param ${show(field)}, named in the message`, { param: e.param, message: e.message });
    ok(`${what} -> 400, param ${field}: ${e.message}`);
    return;
  }
  throw new Failed(`${what}: want BadRequestError (400, param ${field}); it was answered: ${show(r).slice(0, 300)}`);
}

async function main() {
  // /v1/models
  const models = await client.models.list();
  check(models.data.some((m) => m.id === "dptrain"), "models.list(): want the model dptrain", models.data);
  ok(`models.list() -> ${models.data.map((m) => m.id).join(", ")}`);

  // A greedy completion.
  const one = await completion({ prompt: "The ", max_tokens: 8 });
  const c0 = one.choices[0];
  check(one.choices.length === 1 && typeof c0.text === "string" && c0.index === 0,
        "completions: want one choice (index 0) of text", one.choices);
  check(c0.finish_reason === "length" && one.usage.completion_tokens === 8,
        "completions, max_tokens 8: want finish_reason length and 8 completion tokens", { choice: c0, usage: one.usage });
  ok(`completions.create("The ", 8 tokens, greedy) -> ${show(c0.text)}, finish_reason length, usage ${show(one.usage)}`);

  // Streamed: the chunks' texts make the same answer.
  const stream = await client.completions.create({ ...greedy, prompt: "The ", max_tokens: 8, stream: true });
  let streamed = "", chunks = 0, finish = null;
  for await (const chunk of stream) {
    chunks++;
    for (const c of chunk.choices) {
      streamed += c.text ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(streamed === c0.text, "streamed completion: want the chunks' texts to join into the answer unstreamed", { streamed, whole: c0.text });
  check(finish === "length", "streamed completion: want a chunk with finish_reason length", finish);
  ok(`streamed completion: ${chunks} chunks join into ${show(streamed)}, as unstreamed`);

  // echo + logprobs with max_tokens 0: the prompt scored.
  const prompt = "The cat";
  const e = await completion({ prompt, max_tokens: 0, echo: true, logprobs: 1 });
  const ec = e.choices[0], lp = ec.logprobs;
  check(e.choices.length === 1 && ec.text === prompt, "echo, max_tokens 0: want the prompt as the text", ec);
  check(lp && Array.isArray(lp.tokens) && lp.tokens.length === e.usage.prompt_tokens && lp.tokens.join("") === prompt,
        `echo: want logprobs.tokens, usage.prompt_tokens (${e.usage.prompt_tokens}) of them, joining into the prompt`, lp);
  const n = lp.tokens.length;
  check(lp.token_logprobs.length === n && lp.token_logprobs[0] === null &&
        lp.token_logprobs.slice(1).every((x) => typeof x === "number" && x < 0),
        "echo: want token_logprobs null for the first token, negative numbers after", lp.token_logprobs);
  // (One token each, or two where the prompt's own is listed beside the likeliest, as OpenAI lists it.)
  check(lp.top_logprobs.length === n && lp.top_logprobs[0] === null &&
        lp.top_logprobs.slice(1).every((t, i) => t && [1, 2].includes(Object.keys(t).length) &&
                                         Math.max(...Object.values(t)) >= lp.token_logprobs[i + 1]),
        "echo, logprobs 1: want top_logprobs null first, then the likeliest token each, at least as likely as the prompt's",
        { top_logprobs: lp.top_logprobs, token_logprobs: lp.token_logprobs });
  check(lp.text_offset.length === n && lp.text_offset[0] === 0 &&
        lp.text_offset.every((o, i) => i === 0 || o > lp.text_offset[i - 1]),
        "echo: want text_offset from 0, increasing", lp.text_offset);
  check(ec.finish_reason === "length" && e.usage.completion_tokens === 0,
        "echo, max_tokens 0: want finish_reason length and 0 completion tokens", { finish_reason: ec.finish_reason, usage: e.usage });
  ok(`echo + logprobs 1, max_tokens 0: ${n} tokens ${show(lp.tokens)}, logprobs ${show(lp.token_logprobs.map((x) => x === null ? x : +x.toFixed(3)))}`);

  // Several prompts: a choice each, in order, each the answer alone.
  const alone = [await textOf("The ", 4), await textOf("A ", 4)];
  const two = await completion({ prompt: ["The ", "A "], max_tokens: 4 });
  check(two.choices.length === 2 && two.choices.every((c, i) => c.index === i && c.text === alone[i]),
        `prompts ["The ", "A "]: want choices 0 and 1 equal to each alone (${show(alone)})`, two.choices);
  ok(`prompts ["The ", "A "] -> ${show(two.choices.map((c) => c.text))}, each as alone`);

  // Token ids: one prompt, and several.
  const ids = [[1, 2, 3], [4, 5]];
  const byId = await completion({ prompt: ids[0], max_tokens: 4 });
  check(byId.choices.length === 1 && typeof byId.choices[0].text === "string" && byId.usage.prompt_tokens === 3,
        `prompt ${show(ids[0])}: want one choice and 3 prompt tokens`, byId);
  const idsAlone = [byId.choices[0].text, await textOf(ids[1], 4)];
  const byIds = await completion({ prompt: ids, max_tokens: 4 });
  check(byIds.choices.length === 2 && byIds.choices.every((c, i) => c.index === i && c.text === idsAlone[i]),
        `prompt ${show(ids)}: want two choices equal to each alone (${show(idsAlone)})`, byIds.choices);
  ok(`token id prompts ${show(ids[0])} -> ${show(idsAlone[0])}; ${show(ids)} -> 2 choices, each as alone`);

  // Chat.
  const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }];
  const chat = await client.chat.completions.create({ ...greedy, messages, max_tokens: 8 });
  const m = chat.choices?.[0]?.message;
  check(chat.object === "chat.completion" && chat.choices.length === 1 && m?.role === "assistant" && typeof m.content === "string",
        "chat: want a chat.completion with one assistant message", chat);
  const u = chat.usage;
  check(u && u.prompt_tokens > 0 && u.completion_tokens >= 0 && u.completion_tokens <= 8 &&
        u.total_tokens === u.prompt_tokens + u.completion_tokens && ["length", "stop"].includes(chat.choices[0].finish_reason),
        "chat: want usage (at most 8 completion tokens) and finish_reason length or stop", chat);
  ok(`chat.completions.create -> ${show(m.content)}, finish_reason ${chat.choices[0].finish_reason}, usage ${show(u)}`);

  const chatStream = await client.chat.completions.create({ ...greedy, messages, max_tokens: 8, stream: true });
  const deltas = [];
  for await (const chunk of chatStream) deltas.push(chunk);
  check(deltas.length > 0 && deltas.every((d) => d.object === "chat.completion.chunk"), "streamed chat: want chat.completion.chunk objects", deltas);
  const joined = deltas.map((d) => d.choices[0]?.delta?.content ?? "").join("");
  check(joined === m.content, "streamed chat: want the deltas to join into the content unstreamed", { joined, whole: m.content });
  check(deltas[0].choices[0].delta.role === "assistant", "streamed chat: want the first delta to have role assistant", deltas[0]);
  const last = deltas[deltas.length - 1].choices[0];
  check(last.finish_reason === chat.choices[0].finish_reason,
        `streamed chat: want the last chunk to have finish_reason ${chat.choices[0].finish_reason}`, deltas[deltas.length - 1]);
  ok(`streamed chat: ${deltas.length} chunks, role first, join into ${show(joined)}, last with finish_reason ${last.finish_reason}`);

  // Refusals: BadRequestError naming the field.
  await refused("chat with tools", "tools", () => client.chat.completions.create({
    ...greedy, messages, max_tokens: 8,
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }],
  }));
  await refused("completions with logprobs 9", "logprobs", () => completion({ prompt: "The ", max_tokens: 4, logprobs: 9 }));
  await refused("completions with max_tokens 0 and no echo", "max_tokens", () => completion({ prompt: "The ", max_tokens: 0 }));
  await refused("stream with echo", "stream", () => client.completions.create({ ...greedy, prompt: "The ", max_tokens: 4, stream: true, echo: true }));
  // A field the API lacks: the SDK sends what the params object holds.
  await refused("completions with an unknown field max_token", "max_token", () => completion({ prompt: "The ", max_token: 4 }));
}

main().catch((e) => {
  console.error(`FAIL: ${e instanceof Failed ? e.message : e?.stack ?? e}`);
  process.exit(1);
});
