package api

// Error is the body of every error response: {"error": {"code", "message"}}.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong, for programs (code) and people (message).
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
