// A small agent on the official Node SDK: one call, then a streamed call that continues the
// conversation. Prints what it received as JSON (the test compares direct and proxied runs).
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ apiKey: "sk-ant-api03-NODECLIENTNODECLIENT", baseURL: process.env.BASE_URL, maxRetries: 0 });
const system = [{ type: "text", text: "You are the refund analyst.", cache_control: { type: "ephemeral" } }];
const first = [{ role: "user", content: "Why did refunds rise in week 47?" }];

const message = await client.messages.create({ model: "claude-sonnet-5-5", max_tokens: 256, system, messages: first });
const events = [];
const stream = await client.messages.create({
  model: "claude-sonnet-5-5", max_tokens: 256, system, stream: true,
  messages: [...first, { role: "assistant", content: message.content }, { role: "user", content: "And week 48?" }],
});
for await (const event of stream) events.push(event);
let error = null;
try {
  await client.messages.create({ model: "rate-limited", max_tokens: 5, messages: first });
} catch (err) {
  error = { status: err.status, body: err.error };
}
process.stdout.write(JSON.stringify({ message, events, error }));
