"""The client side of an episode: the environment client, the generation loop and the
driver that plays a batch of episodes for a trainer or an evaluation."""
