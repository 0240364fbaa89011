package server

import (
	"net/http"

	"github.com/warmpath/warmpath/libs/openai"
)

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req openai.TokenizeRequest
	if !s.decodeOrReply(w, r, &req) || !s.modelOrReply(w, req.Model) {
		return
	}
	var (
		ids []uint32
		err error
	)
	switch {
	case req.Prompt != nil && req.Messages != nil:
		err = openai.Errorf(http.StatusBadRequest, "give either prompt or messages, not both")
	case req.Prompt != nil:
		ids, err = s.cfg.Tokenizer.Encode(*req.Prompt)
	case req.Messages != nil:
		if err = validateMessages(req.Messages); err == nil {
			ids, err = s.cfg.Tokenizer.EncodeChat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
		}
	default:
		err = openai.ParamErrorf("prompt", "either prompt or messages is required")
	}
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if ids == nil {
		ids = []uint32{}
	}
	writeJSON(w, http.StatusOK, openai.TokenizeResponse{Count: len(ids), MaxModelLen: s.cfg.MaxModelLen, Tokens: ids})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req openai.DetokenizeRequest
	if !s.decodeOrReply(w, r, &req) || !s.modelOrReply(w, req.Model) {
		return
	}
	if err := s.cfg.Tokenizer.Validate(req.Tokens); err != nil {
		openai.WriteError(w, openai.ParamErrorf("tokens", "%v", err))
		return
	}
	text, err := s.cfg.Tokenizer.Decode(req.Tokens)
	if err != nil {
		openai.WriteError(w, openai.ParamErrorf("tokens", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, openai.DetokenizeResponse{Prompt: text})
}
