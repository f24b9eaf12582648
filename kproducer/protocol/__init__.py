"""Sans-IO Kafka wire protocol: primitives, messages, record batches, compression. No sockets here."""
