"""A small random-weight llama model in GGUF, generated at test time (nothing is downloaded).

The vocabulary is a tiny SentencePiece (SPM) one: control tokens, 256 byte-fallback tokens, every
printable ASCII character, and a list of English words with all their `▁`-prefixes (so the SPM
merge walk can reach every word, and re-tokenizing an answer gives back exactly the generated
tokens). Weights are Gaussian scaled by 1/√fan_in, so activations stay O(1) through the layers.

Residual dimension 0 is held constant (embedding column 0 = 1, the rows of `attn_output` and
`ffn_down` that write it are 0), and the output matrix reads that dimension with a large negative
weight for every token we never want generated: control, byte, single characters other than `,`
and `.`, and word fragments. So the model only emits whole words and punctuation — one token per
streamed chunk, valid UTF-8, no end-of-sequence token (every answer runs to `max_tokens`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORD_TEXT = """
the of and to in is it you that he was for on are with as his they be at one have this from or
had by hot word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long make
thing see him two has look more day could go come did number sound no most people my over know
water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father
head stand own page should country found answer school grow study still learn plant cover food
sun four between state keep eye never last let thought city tree cross farm hard start might
story saw far sea draw left late run while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those both mark
often letter until mile river car feet care second book carry took science eat room friend began
idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl
usual young ready above ever red list though feel talk bird soon body dog family direct pose leave
song measure door product black short numeral class wind question happen complete ship area half
rock order fire south problem piece told knew pass since top whole king space heard best hour
better true during hundred five remember step early hold west ground interest reach fast verb sing
listen six table travel less morning ten simple several vowel toward war lay against pattern slow
center love person money serve appear road map rain rule govern pull cold notice voice unit power
town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest
correct able pound done beauty drive stood contain front teach week final gave green quick develop
ocean warm free minute strong special mind behind clear tail produce fact street inch multiply
nothing course stay wheel full force blue object decide surface deep moon island foot system busy
test record boat common gold possible plane stead dry wonder laugh thousand ago ran check game
shape equate miss brought heat snow tire bring yes distant fill east paint language among
"""
WORDS = tuple(_WORD_TEXT.split())

SPACE = "\u2581"  # SentencePiece's word-boundary marker
OUTPUT_PUNCTUATION = (",", ".")

# gguf.TokenType values (kept here so importing this module does not need gguf)
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a generated model."""

    dim: int = 64
    layers: int = 2
    heads: int = 4
    context: int = 2048
    seed: int = 0

    @property
    def ffn(self) -> int:
        """Feed-forward width (llama's 8/3·dim rounded up to a multiple of 16)."""
        return -(-(self.dim * 8 // 3) // 16) * 16


TINY = ModelSpec(dim=64, layers=2, heads=4)        # ≈ 1 MB: well under a millisecond a token
# Every matrix row a multiple of 32 (the ffn is 256 wide), so every matrix can be quantised.
QUANTISABLE = ModelSpec(dim=96, layers=2, heads=4)  # ≈ 2 MB
SMALL = ModelSpec(dim=256, layers=4, heads=4)      # ≈ 15 MB: a few milliseconds a token
REALISTIC = ModelSpec(dim=512, layers=8, heads=8)  # ≈ 100 MB: ~10 ms per token on one thread


@dataclass(frozen=True)
class Vocabulary:
    """The generated vocabulary: token strings, types, and which ids the model may emit."""

    tokens: tuple[str, ...]
    types: tuple[int, ...]
    allowed: frozenset[int]

    def tokenize(self, text: str) -> list[str]:
        """Tokenize model output the way the model produced it (llama SPM, space prefix added)."""
        pieces: list[str] = []
        index = set(self.tokens)
        for raw in (SPACE + text.replace(" ", SPACE)).split(SPACE):
            if not raw:
                continue
            word, rest = raw, ""
            while word and SPACE + word not in index:
                word, rest = word[:-1], word[-1] + rest
            pieces += [SPACE + word] if word else [SPACE]
            pieces += list(rest)
        return pieces


def build_vocabulary() -> Vocabulary:
    """The SPM vocabulary described in the module docstring."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [UNKNOWN, CONTROL, CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    singles = [SPACE] + [chr(c) for c in range(0x21, 0x7F)]
    seen = set(tokens)
    fragments: list[str] = []
    words: list[str] = []
    for word in dict.fromkeys(WORDS):
        for end in range(1, len(word) + 1):
            piece = SPACE + word[:end]
            if end == len(word):
                words.append(piece)
            elif piece not in seen:
                fragments.append(piece)
            seen.add(piece)
    # a whole word may also be a prefix of a longer one ("▁in" of "▁into"): it stays a word
    whole = set(words)
    fragments = [f for f in dict.fromkeys(fragments) if f not in whole]
    allowed: set[int] = set()
    for piece in singles + fragments + words:
        if piece in tokens:
            continue
        if piece in whole or piece in OUTPUT_PUNCTUATION:
            allowed.add(len(tokens))
        tokens.append(piece)
        types.append(NORMAL)
    return Vocabulary(tuple(tokens), tuple(types), frozenset(allowed))


def write_model(path: Path, spec: ModelSpec = TINY, *, quantisation: str | None = None,
                logit_scale: float = 1.0) -> Vocabulary:
    """Write a random llama GGUF model of `spec` to `path`; returns its vocabulary.

    The same `spec` (seed) always gives the same weights: `quantisation` ("Q8_0", "Q4_0")
    writes those weights quantised as llama.cpp's own quantiser would (every matrix whose rows
    are whole 32-value blocks; norms stay F32), a quantised copy of the same model.
    `logit_scale` multiplies the output matrix: a larger one makes the model surer of its next
    word, as a trained model is (a random one is close to uniform over its vocabulary).
    """
    import gguf
    import numpy as np
    from gguf import quants

    vocab = build_vocabulary()
    n_vocab, dim, ffn = len(vocab.tokens), spec.dim, spec.ffn
    head_dim = dim // spec.heads
    rng = np.random.default_rng(spec.seed)

    def linear(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) / math.sqrt(cols))

    qtype = getattr(gguf.GGMLQuantizationType, quantisation) if quantisation else None
    writer = gguf.GGUFWriter(str(path), "llama")
    add_tensor = writer.add_tensor

    def add(name: str, tensor: np.ndarray) -> None:
        if qtype is None or tensor.ndim != 2 or tensor.shape[1] % 32:
            add_tensor(name, tensor)
            return
        add_tensor(name, quants.quantize(tensor, qtype), raw_dtype=qtype)

    writer.add_name(f"random-llama-{dim}x{spec.layers}")
    writer.add_context_length(spec.context)
    writer.add_embedding_length(dim)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype is None
                         else getattr(gguf.LlamaFileType, f"MOSTLY_{quantisation}"))
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_scores([0.0 if t != NORMAL else -float(i)
                             for i, t in enumerate(vocab.types)])
    writer.add_token_types(list(vocab.types))
    writer.add_unk_token_id(UNK_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHAT_TEMPLATE)

    embed = rng.standard_normal((n_vocab, dim), dtype=np.float32)
    embed[:, 0] = 1.0  # the constant residual dimension
    add("token_embd.weight", embed)
    ones = np.ones(dim, dtype=np.float32)
    for layer in range(spec.layers):
        prefix = f"blk.{layer}"
        add(f"{prefix}.attn_norm.weight", ones)
        add(f"{prefix}.attn_q.weight", linear(spec.heads * head_dim, dim))
        add(f"{prefix}.attn_k.weight", linear(spec.heads * head_dim, dim))
        add(f"{prefix}.attn_v.weight", linear(spec.heads * head_dim, dim))
        attn_out = linear(dim, spec.heads * head_dim)
        attn_out[0, :] = 0.0
        add(f"{prefix}.attn_output.weight", attn_out)
        add(f"{prefix}.ffn_norm.weight", ones)
        add(f"{prefix}.ffn_gate.weight", linear(ffn, dim))
        add(f"{prefix}.ffn_up.weight", linear(ffn, dim))
        down = linear(dim, ffn)
        down[0, :] = 0.0
        add(f"{prefix}.ffn_down.weight", down)
    add("output_norm.weight", ones)
    output = linear(n_vocab, dim) * np.float32(logit_scale)
    output[:, 0] = 0.0
    banned = np.array([i not in vocab.allowed for i in range(n_vocab)])
    output[banned, 0] = -40.0
    add("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return vocab
