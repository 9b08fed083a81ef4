"""RocketMQ's remoting protocol with no I/O: frames, headers, stored messages, routes."""
