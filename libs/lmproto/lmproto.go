// Package lmproto is LMCache's `lm://` protocol: the wire format spoken
// between an LMCache worker and an LMCache server (the reference server is
// lmcache/server), and a client for it. warmpath's cache server serves it;
// the simulator and tests use the client.
//
// The protocol has no request ids and no framing beyond fixed headers:
// one connection per worker process, requests strictly in order. Every
// integer is a little-endian int32.
//
//	request (186 bytes): command length fmt dtype location shape0..3 | key (150 bytes, space-padded)
//	reply    (36 bytes): code length fmt dtype shape0..3 location
//
// PUT is followed by exactly `length` payload bytes and gets no reply. GET
// gets a reply, then `length` bytes on a hit (code 200) or nothing on a miss
// (code 400). EXIST and HEALTH get a reply only, as does DELETE, which is
// warmpath's extension for forwarding between cluster nodes.
package lmproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Commands.
const (
	CmdPut    int32 = 1
	CmdGet    int32 = 2
	CmdExist  int32 = 3
	CmdList   int32 = 4 // defined upstream, never sent by LMCache workers
	CmdHealth int32 = 5
	// CmdDelete is warmpath's own, never sent by LMCache: a cluster node
	// forwards a RESP DEL to the key's owners with it. The reply's code is
	// 200 when the key was there, else 400; no value follows.
	CmdDelete int32 = 6
)

// Reply codes.
const (
	CodeSuccess int32 = 200
	CodeFail    int32 = 400
)

// Sizes on the wire.
const (
	KeySize            = 150
	RequestHeaderSize  = 9*4 + KeySize // 186
	ReplyHeaderSize    = 9 * 4         // 36
	DefaultMaxValueLen = 1 << 30       // 1 GiB
)

// ErrProtocol wraps every malformed-input error: the connection that sent
// it must be closed, as nothing after it can be framed.
var ErrProtocol = errors.New("lmproto: protocol error")

// Meta is what LMCache stores beside a value and must get back on GET: the
// client sizes its buffer from it.
type Meta struct {
	Length   int32
	Fmt      int32
	Dtype    int32
	Location int32
	Shape    [4]int32
}

// RequestHeader is the fixed 186-byte request header.
type RequestHeader struct {
	Command int32
	Meta
	Key string
}

// ReplyHeader is the fixed 36-byte reply header. Location comes last on the
// wire, unlike in the request.
type ReplyHeader struct {
	Code int32
	Meta
}

// AppendRequest appends h's wire form. Keys longer than KeySize, or with
// bytes that would not survive the server's trimming (trailing spaces or
// NULs), are rejected.
func AppendRequest(dst []byte, h *RequestHeader) ([]byte, error) {
	if err := ValidKey(h.Key); err != nil {
		return dst, err
	}
	for _, v := range []int32{h.Command, h.Length, h.Fmt, h.Dtype, h.Location, h.Shape[0], h.Shape[1], h.Shape[2], h.Shape[3]} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	dst = append(dst, h.Key...)
	for range KeySize - len(h.Key) {
		dst = append(dst, ' ')
	}
	return dst, nil
}

// ValidKey reports whether key can be sent: at most KeySize bytes, not
// empty, and not ending in a space or NUL (the server trims those).
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrProtocol)
	case len(key) > KeySize:
		return fmt.Errorf("%w: key of %d bytes, at most %d", ErrProtocol, len(key), KeySize)
	case key[len(key)-1] == ' ' || key[len(key)-1] == 0:
		return fmt.Errorf("%w: key ends in a space or NUL, which the server trims", ErrProtocol)
	}
	return nil
}

// ParseRequest decodes a 186-byte request header. The key is trimmed of
// trailing spaces and NULs, as the reference server does. An empty key is
// malformed except in a HEALTH request, which the reference server answers
// without reading its key.
func ParseRequest(b []byte) (RequestHeader, error) {
	if len(b) != RequestHeaderSize {
		return RequestHeader{}, fmt.Errorf("%w: request header of %d bytes, want %d", ErrProtocol, len(b), RequestHeaderSize)
	}
	v := func(i int) int32 { return int32(binary.LittleEndian.Uint32(b[4*i:])) }
	h := RequestHeader{Command: v(0), Meta: Meta{Length: v(1), Fmt: v(2), Dtype: v(3), Location: v(4), Shape: [4]int32{v(5), v(6), v(7), v(8)}}}
	key := bytes.TrimRight(b[36:], " \x00")
	if len(key) == 0 && h.Command != CmdHealth {
		return RequestHeader{}, fmt.Errorf("%w: empty key", ErrProtocol)
	}
	h.Key = string(key)
	return h, nil
}

// AppendReply appends r's wire form.
func AppendReply(dst []byte, r *ReplyHeader) []byte {
	for _, v := range []int32{r.Code, r.Length, r.Fmt, r.Dtype, r.Shape[0], r.Shape[1], r.Shape[2], r.Shape[3], r.Location} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	return dst
}

// ParseReply decodes a 36-byte reply header.
func ParseReply(b []byte) (ReplyHeader, error) {
	if len(b) != ReplyHeaderSize {
		return ReplyHeader{}, fmt.Errorf("%w: reply header of %d bytes, want %d", ErrProtocol, len(b), ReplyHeaderSize)
	}
	v := func(i int) int32 { return int32(binary.LittleEndian.Uint32(b[4*i:])) }
	return ReplyHeader{Code: v(0), Meta: Meta{Length: v(1), Fmt: v(2), Dtype: v(3), Shape: [4]int32{v(4), v(5), v(6), v(7)}, Location: v(8)}}, nil
}

// Request is one decoded request; Value is set for PUT.
type Request struct {
	RequestHeader
	Value []byte
}

// Reader reads requests from a connection.
type Reader struct {
	r       io.Reader
	max     int
	reserve func(n int) error
	header  [RequestHeaderSize]byte
}

// SetReserve makes the reader call reserve, for a PUT that passed the
// maxValue check, with the bytes about to be read, 256 KiB at a time,
// before reading them (the calls add up to the value's length): a server
// counts them against its memory (and may make the connection wait for
// room). What is reserved thus follows what a peer sends, not what its
// header announces. A reserve error ends Next with that error.
func (r *Reader) SetReserve(reserve func(n int) error) { r.reserve = reserve }

// NewReader reads requests from r; PUT values over maxValue bytes (<= 0:
// DefaultMaxValueLen) are a protocol error.
func NewReader(r io.Reader, maxValue int) *Reader {
	if maxValue <= 0 {
		maxValue = DefaultMaxValueLen
	}
	return &Reader{r: r, max: maxValue}
}

// Next reads one request. It returns io.EOF at a clean end between
// requests, and an ErrProtocol-wrapped error for anything malformed: an
// unknown command, a negative or oversized length, a truncated frame. A
// PUT's value is read whole into a fresh slice (see ReadValue) before Next
// returns, so nothing half-received is ever stored.
func (r *Reader) Next() (*Request, error) {
	if _, err := io.ReadFull(r.r, r.header[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated request header", ErrProtocol)
		}
		return nil, err
	}
	h, err := ParseRequest(r.header[:])
	if err != nil {
		return nil, err
	}
	req := &Request{RequestHeader: h}
	switch h.Command {
	case CmdPut:
		if h.Length < 0 || int(h.Length) > r.max {
			return nil, fmt.Errorf("%w: PUT of %d bytes (limit %d)", ErrProtocol, h.Length, r.max)
		}
		// Not make(h.Length): the buffer grows as the bytes arrive, so a
		// header alone cannot make the server allocate (or reserve) the
		// limit.
		var reserveErr error
		reserve := r.reserve
		if reserve != nil {
			reserve = func(n int) error {
				reserveErr = r.reserve(n)
				return reserveErr
			}
		}
		v, err := readValue(r.r, int(h.Length), reserve)
		if reserveErr != nil {
			return nil, fmt.Errorf("lmproto: PUT of %d bytes: %w", h.Length, reserveErr)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: PUT value truncated after %d of %d bytes: %w", ErrProtocol, len(v), h.Length, err)
		}
		req.Value = v
	case CmdGet, CmdExist, CmdHealth, CmdDelete:
	default:
		return nil, fmt.Errorf("%w: unknown command %d", ErrProtocol, h.Command)
	}
	return req, nil
}
