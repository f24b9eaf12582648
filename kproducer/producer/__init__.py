"""The producer: BufferPool, RecordAccumulator, ProducerBatch, Sender thread, partitioners, futures."""
