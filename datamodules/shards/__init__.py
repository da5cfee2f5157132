"""Datasets as WebDataset tar shards, for data past one disk: ``writer`` writes them from any dataset the data
modules read, ``store`` reads their members from a local folder or a URL (downloaded once into a local cache),
``index`` turns them back into the datasets."""
