"""One worker's training: networks, optimizers, data partitions and batches, augmentation,
classification metrics and the model export. Imports the contract, never the exchange."""
