package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error types used in ErrorBody.Type. vLLM names them after the HTTP status
// (BadRequestError, NotFoundError, ...); OpenAI clients only show them.
const (
	TypeBadRequest         = "BadRequestError"
	TypeNotFound           = "NotFoundError"
	TypeRequestTooLarge    = "RequestTooLargeError"
	TypeTooManyRequests    = "TooManyRequestsError"
	TypeInternal           = "InternalServerError"
	TypeServiceUnavailable = "ServiceUnavailableError"
	TypeGatewayTimeout     = "GatewayTimeoutError"
	TypeUnauthorized       = "AuthenticationError"
)

// ErrorBody is the inner object of an OpenAI-style error response.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// ErrorResponse is the body of every non-2xx response:
// {"error": {"message", "type", "param", "code"}}.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// APIError is an error that knows its HTTP status and OpenAI error type.
// Handlers return it and a single writer turns it into a response.
type APIError struct {
	Status  int
	Type    string
	Param   string
	Message string
}

func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (param %s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// Errorf returns an APIError with the given status; the type is derived from
// the status.
func Errorf(status int, format string, args ...any) *APIError {
	return &APIError{Status: status, Type: typeForStatus(status), Message: fmt.Sprintf(format, args...)}
}

// ParamErrorf returns a 400 APIError naming the offending request field.
func ParamErrorf(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: TypeBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func typeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return TypeBadRequest
	case http.StatusUnauthorized:
		return TypeUnauthorized
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeRequestTooLarge
	case http.StatusTooManyRequests:
		return TypeTooManyRequests
	case http.StatusServiceUnavailable:
		return TypeServiceUnavailable
	case http.StatusGatewayTimeout:
		return TypeGatewayTimeout
	default:
		return TypeInternal
	}
}

// Body returns the wire form of e.
func (e *APIError) Body() ErrorResponse {
	b := ErrorBody{Message: e.Message, Type: e.Type, Code: e.Status}
	if e.Param != "" {
		p := e.Param
		b.Param = &p
	}
	return ErrorResponse{Error: b}
}

// WriteError writes err as an OpenAI-style JSON error. Errors that are not
// *APIError become 500s with their message.
func WriteError(w http.ResponseWriter, err error) {
	apiErr, ok := err.(*APIError) //nolint:errorlint // only direct APIErrors carry a status
	if !ok {
		apiErr = Errorf(http.StatusInternalServerError, "%v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(apiErr.Status)
	_ = json.NewEncoder(w).Encode(apiErr.Body())
}
