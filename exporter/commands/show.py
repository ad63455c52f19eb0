"""`probe --show-request`: the exact request each selected probe sends, without sending it.

The method, URL, headers and JSON body as the prober builds them for a first run (a daemon that
adapted a parameter after a refusal sends the adapted form; `/config` lists those). Secrets are
redacted: authentication headers by name, then every value by the redactor. A SigV4 signature
is computed only when a request is sent, so its headers are not shown.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from exporter.config import Config, ProbeKind, Series
from exporter.log import REDACTED, REDACTOR
from exporter.protocols import embedding_input, embedding_protocol_for, make_prompt, protocol_for

# Headers that carry credentials in some API style; shown as <redacted> whatever their value.
AUTH_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key",
                          "proxy-authorization"})


def show_requests(config: Config, series: Sequence[Series]) -> str:
    """Every selected series' request as text (nonce shown as `<nonce>`), secrets redacted."""
    REDACTOR.update(config.secrets())
    blocks = []
    for item in series:
        key = item.target.api_key
        nonce = "<nonce>" if item.probe.nonce else None
        if item.probe.kind is ProbeKind.EMBEDDING:
            request = embedding_protocol_for(item.target.api).build_request(
                item, embedding_input(item.probe, nonce), key)
        else:
            case = item.probe.rotation[0] if item.probe.rotation else None
            size = item.workload.input_tokens
            context = None if size is None else f"<generated context: about {size} tokens>"
            request = protocol_for(item.target.api).build_request(
                item, make_prompt(item.probe, case, nonce, context,
                                  cache_marker=item.workload.cache is not None), key)
        headers = "\n".join(
            f"{name}: {REDACTED if name.lower() in AUTH_HEADERS else value}"
            for name, value in request.headers.items())
        signed = "\n(signed with AWS SigV4 when sent)" if item.target.aws_sigv4 else ""
        body = orjson.dumps(orjson.loads(request.body), option=orjson.OPT_INDENT_2).decode()
        blocks.append(f"# {'/'.join(item.key)}\nPOST {request.url}\n{headers}{signed}\n\n"
                      f"{body}\n")
    return REDACTOR.net("\n".join(blocks))
