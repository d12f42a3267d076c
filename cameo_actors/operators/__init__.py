"""The operator layer: pure state machines over batches. Imports no Ray or Spark."""
