"""vspec/train/step.py: the one call of a model on a loader's batch, which the training step and evaluation make."""

import torch
from torch import nn

from vspec.train import engine, evaluate, step


class _Named(nn.Module):
    def forward(self, x=None, input_ids=None, attention_mask=None):
        return ("tensor", x) if x is not None else ("named", input_ids, attention_mask)


def test_a_text_batch_is_passed_by_name_an_image_batch_as_it_is():
    images, ids, mask = torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)
    assert step.forward(_Named(), images) == ("tensor", images)
    assert step.forward(_Named(), {"input_ids": ids, "attention_mask": mask}) == ("named", ids, mask)


def test_training_and_evaluation_call_the_same_forward():
    assert engine.forward is step.forward and evaluate.forward is step.forward
