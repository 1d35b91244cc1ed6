"""From files to facts: discovery, the extractor interface, the parallel pipeline."""
