module github.com/warmpath/warmpath/libs

go 1.26

require (
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/text v0.15.0 // indirect
)
