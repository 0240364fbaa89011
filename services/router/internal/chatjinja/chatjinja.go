// Package chatjinja renders chat messages with a model's own Jinja chat
// template (Hugging Face's tokenizer_config.json "chat_template"), as vLLM
// does, so the router can tokenize a chat in-process for models whose
// template is not one of the built-ins. The engine is gonja, a pure Go
// Jinja; it is configured as transformers configures jinja2 for chat
// templates (trim_blocks, lstrip_blocks), with its raise_exception.
package chatjinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/warmpath/warmpath/libs/chattemplate"
)

// Template is a parsed chat template. Safe for concurrent use.
type Template struct {
	tmpl *exec.Template
	env  *exec.Environment
	// bos and eos are the special tokens' text, which templates print
	// (Llama's starts with {{ bos_token }}).
	bos, eos string
}

// maxFileBytes bounds a template file: real ones are a few KiB, a
// tokenizer_config.json with its added tokens some hundreds.
const maxFileBytes = 16 << 20

// Load reads a template from path: either a tokenizer_config.json (its
// chat_template, bos_token and eos_token) or the bare template text.
func Load(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chatjinja: %w", err)
	}
	if len(raw) > maxFileBytes {
		return nil, fmt.Errorf("chatjinja: %s: %d bytes, over %d", path, len(raw), maxFileBytes)
	}
	src, bos, eos, err := ParseFile(raw)
	if err != nil {
		return nil, fmt.Errorf("chatjinja: %s: %w", path, err)
	}
	return New(src, bos, eos)
}

// ParseFile extracts the template source and the BOS and EOS tokens' text
// from a file's bytes: a JSON object is read as a tokenizer_config.json,
// anything else is the template itself.
func ParseFile(raw []byte) (src, bos, eos string, err error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		if len(trimmed) == 0 {
			return "", "", "", errors.New("empty template")
		}
		return string(raw), "", "", nil
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(trimmed, &cfg); err != nil {
		return "", "", "", fmt.Errorf("tokenizer config: %w", err)
	}
	if src, err = chatTemplate(cfg.ChatTemplate); err != nil {
		return "", "", "", err
	}
	if bos, err = tokenText(cfg.BOS); err != nil {
		return "", "", "", fmt.Errorf("bos_token: %w", err)
	}
	if eos, err = tokenText(cfg.EOS); err != nil {
		return "", "", "", fmt.Errorf("eos_token: %w", err)
	}
	return src, bos, eos, nil
}

// chatTemplate reads "chat_template": a string, or a list of named
// templates of which the one named "default" is the chat template.
func chatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("no chat_template")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", errors.New("empty chat_template")
		}
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("chat_template must be a string or a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" && n.Template != "" {
			return n.Template, nil
		}
	}
	return "", errors.New("chat_template has no template named default")
}

// tokenText reads a special token: a string, or an AddedToken object
// whose "content" is the text.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var tok struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &tok); err != nil {
		return "", errors.New("want a string or {\"content\": ...}")
	}
	return tok.Content, nil
}

// New parses template source.
func New(src, bos, eos string) (*Template, error) {
	cfg := config.New()
	// As transformers' apply_chat_template: jinja2 with trim_blocks and
	// lstrip_blocks, so the whitespace around {% %} tags is not rendered.
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	cfg.KeepTrailingNewline = false
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", raiseException)
	env := &exec.Environment{
		Context:           ctx,
		Filters:           builtins.Filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
	loader, err := loaders.NewMemoryLoader(map[string]string{"/chat_template": src})
	if err != nil {
		return nil, fmt.Errorf("chatjinja: %w", err)
	}
	tmpl, err := parse(cfg, loader, env)
	if err != nil {
		return nil, fmt.Errorf("chatjinja: parse: %w", err)
	}
	return &Template{tmpl: tmpl, env: env, bos: bos, eos: eos}, nil
}

// parse turns a panic of the engine on a malformed template into an error.
func parse(cfg *config.Config, loader loaders.Loader, env *exec.Environment) (t *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template engine panicked: %v", r)
		}
	}()
	return exec.NewTemplate("/chat_template", cfg, loader, env)
}

// errRaised is what a template's raise_exception returns.
var errRaised = errors.New("chat template raised an exception")

func raiseException(_ *exec.Evaluator, params *exec.VarArgs) (string, error) {
	msg := ""
	if len(params.Args) > 0 {
		msg = params.Args[0].String()
	}
	return "", fmt.Errorf("%w: %s", errRaised, msg)
}

// Render applies the template, as vLLM's /tokenize and chat completions
// do, with messages, add_generation_prompt, bos_token and eos_token set.
// An error (the template raised, or the engine failed or panicked) means
// the caller must ask the worker instead.
func (t *Template) Render(msgs []chattemplate.Message, addGenerationPrompt bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chatjinja: template engine panicked: %v", r)
		}
	}()
	list := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := exec.NewContext(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bos,
		"eos_token":             t.eos,
	})
	var sb strings.Builder
	if err := t.tmpl.Execute(&sb, data); err != nil {
		return "", fmt.Errorf("chatjinja: render: %w", err)
	}
	return sb.String(), nil
}
