"""Recording and sending manifests: the schema, the builder, the client, transport, spool and usage."""
