"""An OpenAI/Anthropic-compatible LLM server with scripted, timing-accurate latency and faults.

Used by the demo config, the tests and the benchmarks. Endpoints (base path `/v1`):

    POST /v1/chat/completions   OpenAI chat (stream or not; `stream_options.include_usage`)
    POST /v1/completions        OpenAI legacy completions (reasoning is hidden: it only spends time)
    POST /v1/messages           Anthropic Messages (thinking block, then text block)
    GET  /v1/models[/{model}]   OpenAI list (Anthropic's shape when `anthropic-version` is sent)
    GET  /health                200 "ok"

Timing: every chunk is written at an absolute deadline from the moment the handler started
(`loop.time()`): token k (reasoning first, then answer) at `start + ttft + k*tpot`, a chunk of
several tokens when its last token is due. `ttft` and `tpot` are drawn once per request within
±`jitter` of the profile. When a model's `capacity` is reached, requests wait in FIFO order and
their clock restarts when they get a slot, so queueing adds to TTFT. A streamed answer opens with
a non-token event at once (OpenAI chat: the role-only chunk; Anthropic: message_start,
content_block_start, ping). What happened is kept in `app[SIM_RECORDS]` (see `SimRecord`).

Faults come from the profile (`error_rate`/`error_status`, `stall_rate`/`stall`,
`disconnect_rate`) or, per request, from optional headers:

    x-sim-fault: 500 | 429 | <any 400..599>   answer with that status and a provider-like body
                                              (429 adds `Retry-After: 1`); `error` uses
                                              the profile's `error_status`
    x-sim-fault: stall                        hang for `stall` seconds after the first chunk
    x-sim-fault: disconnect                   drop the connection after about half the tokens
    x-sim-fault: error-in-stream              200 stream carrying an error object mid-way
                                              (OpenAI: `data: {"error": …}` then [DONE];
                                              Anthropic: `event: error`)
    x-sim-fault: none                         no fault, whatever the profile's rates
    x-sim-ttft, x-sim-tpot, x-sim-stall       durations (`200ms`, `0.2`) replacing the profile's
    x-sim-jitter                              0..1
    x-sim-output-tokens, x-sim-reasoning-tokens, x-sim-tokens-per-chunk   integers
    x-sim-reasoning: visible | hidden         stream reasoning tokens or only spend their time

When an API key is set, a wrong key is echoed back in full in the 401 body (some gateways do
this), so the exporter's redaction is exercised.
"""

from .app import MAX_RECORDS, SIM_RECORDS, SimRecord, create_app
from .plan import Fault, Finish, Overrides, Plan, make_plan
from .server import Simulator, serve_forever, start_simulator
from .text import VOCABULARY, estimate_tokens

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
    "create_app",
    "estimate_tokens",
    "make_plan",
    "serve_forever",
    "start_simulator",
]
