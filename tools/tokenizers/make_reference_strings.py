#!/usr/bin/env python3
"""Writes tests/data/tokenizers/reference_strings.json: the strings the tokenizer
reference test encodes (tests/model/hf_tokenizer_reference_test.cc).

Usage: python3 tools/tokenizers/make_reference_strings.py \
           ../shared/data/prompts/sharegpt_v3_filtered_500.json tests/data/tokenizers/reference_strings.json

Takes the 500 prompts of the ShareGPT V3 set (Apache-2.0 repository
ml-energy/leaderboard-v2; see ../shared/data/README.md) whole and line by line, and adds
hand-written cases: unicode, emoji (ZWJ sequences, flags), CJK, combining marks (NFC),
code, whitespace runs, numbers, contractions and special-token text of every family.
"""
import json
import sys

HAND = [
    "", " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\t", "\t\t  \n", " \n \n ", "\r\n", "a\r\nb",
    "hello", " hello", "hello ", "  hello  world  ", "Hello,   world!\n\n  Next   line.\t\tTabbed",
    "I'm here. You're there. They've gone. She'll come. He'd know. It's MINE. DON'T",
    "1", "12", "123", "1234", "1234567890", "3.14159 and 2,718,281", "year 2024: 100% (ok)",
    "日本語のテキストです。", "中文文本，包含标点。", "한국어 문장입니다.", "Здравствуй, мир!", "مرحبا بالعالم",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦 family", "🇫🇷🇩🇪", "❤️", "emoji in text 🚀 launch", "🤖🤖🤖 robots",
    "e\u0301", "cafe\u0301 vs café", "A\u030a vs Å", "\u1e9b\u0323", "ﬁ ligature", "Ａｂｃ fullwidth",
    "mixed 漢字 and kana ひらがな カタカナ and ASCII", "数字123和中文", "tab\tand\u00a0nbsp\u2003em space",
    "zero\u200bwidth", "\ufeffBOM", "\u00ad soft hyphen", "replacement \ufffd char",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if (a && b || !c) { return -1; }", "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE id = 1;",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "$HOME/.bashrc",
    "    indented\n        more\n", "trailing spaces   \n", "a" * 300, "ab" * 200, " " * 50, "\n" * 20, "x\n" * 30,
    "!!!???...,,,;;;", "--- *** ___ ===", "''\"\"``", "(((nested)))", "a-b_c.d/e\\f",
    "<s>", "</s>", "<unk>", "<s>[INST] hi [/INST]", "text</s>", "<<s>>",
    "<|endoftext|>", "a<|endoftext|>b", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nAnswer<|im_end|>", "<tool_call>{\"a\": 1}</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|reserved_special_token_0|>x",
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
    "<｜User｜>1+1?<｜Assistant｜><think>\n2\n</think>", "<|im_start|", "im_end|>", "<|im_end|><|im_end|>",
    " <|im_end|> ", "<think>", "x<think>y", "<|begin_of_text|>",
]


def main():
    src, out = sys.argv[1], sys.argv[2]
    prompts = [r["conversations"][0]["value"] for r in json.load(open(src, encoding="utf-8"))[:500]]
    strings, seen = [], set()
    for s in HAND + prompts + [line for p in prompts for line in p.split("\n")]:
        if s not in seen:
            seen.add(s)
            strings.append(s)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(strings)} strings, {sum(len(s.encode()) for s in strings)} bytes")


if __name__ == "__main__":
    main()
