"""Sans-IO stream decoders: Server-Sent Events, NDJSON and the AWS event stream."""
