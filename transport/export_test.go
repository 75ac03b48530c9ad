package transport

// CheckText exposes the frame text rule to the external tests.
var CheckText = checkText
