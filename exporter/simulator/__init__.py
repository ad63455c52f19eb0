"""An LLM server speaking every API style the exporter probes, with scripted, timing-accurate
latency and faults. Used by the demo config, the tests and the benchmarks. Endpoints:

    POST /v1/chat/completions        OpenAI chat (SSE or JSON; `stream_options.include_usage`)
    POST /v1/completions             OpenAI legacy completions (reasoning is hidden: time only)
    POST /v1/responses               OpenAI Responses (typed SSE events, `response.completed`)
    POST /v1/messages                Anthropic Messages (thinking block, then text or tool_use)
    POST /v1/embeddings              OpenAI embeddings (`dimensions`, float or base64)
    POST /{v1,v1beta}/models/{m}:streamGenerateContent?alt=sse | :generateContent
         :embedContent | :batchEmbedContents           Gemini (also the Vertex AI paths
         /{v1,v1beta1}/[projects/{p}/locations/{l}/]publishers/google/models/{m}:…)
    POST /model/{m}/converse-stream | /converse       Bedrock Converse (AWS binary event stream)
    POST /api/chat                   Ollama chat (NDJSON; `think`, `format`, final timings)
    GET  /v1/models[/{model}]        OpenAI list (Anthropic's shape with `anthropic-version`)
    GET  /api/tags                   Ollama's model list
    GET  /health                     200 "ok"
    GET|PATCH|PUT|DELETE /-/simulator/models[/{model}]   run-time faults: a model's profile
                                     changed while serving, and restored (`admin`)

Timing: every chunk is written at an absolute deadline from the moment the handler started
(`loop.time()`): token k (reasoning first, then answer) at `start + ttft + k*tpot`, a chunk of
several tokens when its last token is due. `ttft` and `tpot` are drawn once per request within
±`jitter` of the profile; a profile's `prefill_rate` (prompt tokens per second) adds the prompt's
reading time to TTFT, so TTFT grows with the input as on a real server. When a model's
`capacity` is reached, requests wait in FIFO order and
their clock restarts when they get a slot, so queueing adds to TTFT. A streamed answer opens with
its non-token events at once (OpenAI chat: the role-only chunk; Anthropic: message_start,
content_block_start, ping; Responses: response.created, response.in_progress, the first item;
Bedrock: messageStart). What happened is kept in `app[SIM_RECORDS]` (see `SimRecord`), including
the server timings a response reports (Ollama's `*_duration`, Bedrock's `latencyMs`).

Probe kinds: a request with tools (and a tool_choice that allows a call) gets a call of the
named (else the first) tool, with arguments generated from its parameters schema; the token
naming the tool and every argument piece are timed like words (Gemini and Ollama send the call
whole, when its last token is ready). A request for structured output (`response_format`,
`text.format`, `output_config.format`, `responseSchema`, `outputConfig.textFormat`, Ollama
`format`) gets JSON valid for its schema, split into token-sized pieces. Embeddings answer after
`ttft` with unit vectors that depend only on the text.

Faults come from the profile (`error_rate`/`error_status`, `stall_rate`/`stall`,
`disconnect_rate`) or, per request, from optional headers:

    x-sim-fault: 500 | 429 | <any 400..599>   answer with that status and a provider-like body
                                              (429 adds `Retry-After: 1`); `error` uses
                                              the profile's `error_status`
    x-sim-fault: stall                        hang for `stall` seconds after the first chunk
    x-sim-fault: disconnect                   drop the connection after about half the tokens
    x-sim-fault: error-in-stream              200 stream carrying the API's error mid-way
                                              (OpenAI `data: {"error": …}`, Anthropic
                                              `event: error`, Responses `error` +
                                              `response.failed`, Gemini `{"error": …}`,
                                              Bedrock an exception frame, Ollama an error line)
    x-sim-fault: none                         no fault, whatever the profile's rates
    x-sim-ttft, x-sim-tpot, x-sim-stall       durations (`200ms`, `0.2`) replacing the profile's
    x-sim-jitter                              0..1
    x-sim-output-tokens, x-sim-reasoning-tokens, x-sim-tokens-per-chunk   integers
    x-sim-reasoning: visible | hidden         stream reasoning tokens or only spend their time
    x-sim-tool: none | wrong-name | bad-json | bad-args   answer in text instead of calling,
                                              call an unoffered tool, send arguments that do
                                              not parse, or JSON that breaks the schema
    x-sim-json: invalid | mismatch            structured output that does not parse / breaks
                                              the schema
    x-sim-dimensions: N                       embeddings of N dimensions, whatever was asked

When an API key is set, each API checks it in its own header (`Authorization: Bearer`,
`x-api-key`, `x-goog-api-key` or `?key=`); a wrong OpenAI key is echoed back in full in the 401
body (some gateways do this), so the exporter's redaction is exercised. Bedrock always wants an
`Authorization`: a Bearer API key, or a SigV4 signature that is verified with botocore when the
simulator has AWS keys (`aws_keys`) and only checked for form otherwise.
"""

from .app import create_app
from .plan import Fault, Finish, Overrides, Plan, make_plan
from .server import Simulator, serve_forever, start_simulator
from .state import MAX_RECORDS, SIM_RECORDS, SimRecord
from .text import VOCABULARY, estimate_tokens
from .thread import SimulatorThread, start_simulator_thread

__all__ = [
    "MAX_RECORDS",
    "SIM_RECORDS",
    "VOCABULARY",
    "Fault",
    "Finish",
    "Overrides",
    "Plan",
    "SimRecord",
    "Simulator",
    "SimulatorThread",
    "create_app",
    "estimate_tokens",
    "make_plan",
    "serve_forever",
    "start_simulator",
    "start_simulator_thread",
]
