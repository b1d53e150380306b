#!/usr/bin/env python3
"""tokenizer_corpus.py OUT.json: the texts the tokenizers are checked on, the same every run.

Hand-written cases (scripts, combining marks, emoji sequences, whitespace runs, digits, code, contractions,
special-token text) and seeded random mixes of their pieces and of characters drawn from many scripts. Only
code points assigned in Unicode 14 (Python 3.11's unicodedata, older than the libraries compared) are drawn.
"""
import json
import random
import sys
import unicodedata

CASES = [
    "Hello world", "Hello, World!", " leading space", "trailing space ", "  two  spaces  ", "\tTabs\tand\nnewlines\n",
    "Line one\r\nLine two\r\n\r\n", "\n\n\n", "   \n  \n", "a\u00a0b\u3000c\u2003d", "",
    "I'm sure they'LL say it's what we've DONE, isn't it? He'd've.",
    "1234567890 12 345 6789 3.14159 -42 1e10 0x1F 2024-12-05",
    "\u0663\u0664 \u0966\u0967 \uff11\uff12 \u2460\u2461",
    "caf\u00e9 cafe\u0301 \u1e9b\u0323 A\u030a \u212b \uac00 \u1100\u1161",
    "na\u00efve r\u00e9sum\u00e9 co\u00f6perate \u00fcber Stra\u00dfe",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002 \u3053\u3093\u306b\u3061\u306f\u4e16\u754c \u30ab\u30bf\u30ab\u30ca \uc548\ub155\ud558\uc138\uc694",
    "\U0001F600\U0001F601 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 \U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8 \u2764\ufe0f",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    "<|begin_of_text|>Hello<|eot_id|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] What? [/INST]</s>", "text<|end_of_text|>more", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.",
    "<think>\nreasoning\n</think>\n\nanswer", "<|reserved_special_token_5|>", "<|im_start|><|im_end|>",
    "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "ALL CAPS SHOUTING and lower case and MiXeD CaSe",
    "\u00bd \u00bc \u2153 \u00b2 \u00b3 \u2122 \u00a9 \u00ae \u2026 \u2014 \u2013 \u201c\u201d \u2018\u2019",
    "\ufb01 \ufb02 \u2163 \u33a1 \uff21\uff22\uff23 \u1d2c",
    "zero\u200bwidth\u200cjoiners\u200d\ufeffbom",
]

SCRIPTS = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff), (0x600, 0x6ff),
           (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00),
           (0x300, 0x36f), (0x2000, 0x206f), (0x1f300, 0x1f64f), (0xff00, 0xffef), (0x1d400, 0x1d4ff)]
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "   \n"]


def assigned(c):
    return unicodedata.category(c) not in ("Cn", "Cs", "Co")


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.3:
            lo, hi = rng.choice(SCRIPTS)
            chars = [chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))]
            parts.append("".join(c for c in chars if assigned(c)))
        elif kind < 0.5:
            parts.append(rng.choice(WHITESPACE))
        elif kind < 0.7:
            case = rng.choice(CASES)
            i = rng.randint(0, len(case))
            parts.append(case[i:i + rng.randint(1, 20)])
        elif kind < 0.85:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        else:
            parts.append(rng.choice(["'s", "'T", "'re", "n't", "'ll", "<|eot_id|>", "<s>", "</s>", "<|im_end|>"]))
    return "".join(parts)


def main():
    rng = random.Random(20261205)
    texts = CASES + [random_text(rng) for _ in range(400)]
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
