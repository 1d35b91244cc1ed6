"""Built-in harness manifests (TOML data); see indexer.harness for the format."""
