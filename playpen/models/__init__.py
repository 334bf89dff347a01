"""Model building blocks: the bundled tiny model and the loaders every trainer and player shares."""
