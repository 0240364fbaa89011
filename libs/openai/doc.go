// Package openai holds the OpenAI-compatible wire types that warmpath's
// services and tools share: request and response bodies for completions and
// chat completions, the Server-Sent Events framing used when streaming, and
// OpenAI-style JSON errors.
//
// The shapes follow what `vllm serve` emits, including its extensions
// (prompt_tokens_details.cached_tokens, stop_reason, cache_salt), because
// warmpath sits in front of vLLM workers and must look like one.
package openai
