"""The workflow glue: configuration and its schema, command lines, sharding, rule resources, preflight."""
