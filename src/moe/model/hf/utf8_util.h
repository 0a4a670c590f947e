// UTF-8 and GPT-2 byte-level helpers for the tokenizer.json backend. Internal to
// src/moe/model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moe::hf {

// Length in bytes of the UTF-8 sequence that starts with byte `lead` (1 for a stray
// continuation or invalid byte, so that walking never stalls).
int utf8_len(unsigned char lead);

// The code point at s[i] (advancing i); U+FFFD for an invalid sequence (one byte used).
char32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, char32_t cp);

// `bytes` as valid UTF-8: each maximal invalid subpart becomes U+FFFD, as Rust's
// String::from_utf8_lossy (and so Hugging Face's decoders) do. A truncated character at
// the end becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// GPT-2's bytes_to_unicode: byte -> the code point that stands for it in a byte-level
// vocabulary (printable Latin-1 maps to itself, the rest to U+0100...).
char32_t byte_to_char(unsigned char b);
// The inverse; -1 for a code point that stands for no byte.
int char_to_byte(char32_t cp);

// Each byte of `text` as its byte-level character, UTF-8 encoded.
std::string byte_level_encode(std::string_view text);
// Maps a byte-level token back to bytes; false (out untouched) when some character of
// `token` stands for no byte.
bool byte_level_decode(std::string_view token, std::string* out);

}  // namespace moe::hf
