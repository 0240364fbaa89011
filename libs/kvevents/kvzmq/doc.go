// Package kvzmq carries vLLM's KV-cache event stream over ZMQ: a publisher
// that binds or connects its PUB socket and keeps a replay buffer behind a
// ROUTER socket (the vLLM simulator's and the cache server's side), the
// replay client a subscriber catches up with (the router's side), and
// --kv-events-config, vLLM's settings for them. Every socket goes through
// zmtpguard, so no peer can make zmq4 allocate the frame size it announces.
//
// It is apart from the codec (package kvevents) because only the ends of a
// live stream need the ZMQ library; the format and its fuzzing do not.
package kvzmq
