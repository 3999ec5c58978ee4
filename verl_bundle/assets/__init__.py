"""The asset stage: models and datasets fetched with huggingface_hub (fetch), datasets turned
into verl's parquet files (convert), and the asset bundle written (plan)."""
