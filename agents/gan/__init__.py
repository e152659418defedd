"""A spectral-norm GAN on the digits: two models and two optimizers in one replicated step."""
