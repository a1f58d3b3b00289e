"""The compact tool listing drops prose, never parameters named like JSON-schema keywords."""

from awm_rl.training.rollouts import _strip_docs


def test_compact_listing_keeps_parameters_named_title_or_description():
    schema = {"title": "CreateCampaign", "type": "object", "description": "prose",
              "properties": {"title": {"type": "string", "description": "campaign title"},
                             "description": {"type": "string", "examples": ["x"]},
                             "goal": {"type": "number", "title": "Goal"}},
              "required": ["title", "goal"]}
    out = _strip_docs(schema)
    assert out == {"type": "object", "properties": {"title": {"type": "string"}, "description": {"type": "string"},
                                                    "goal": {"type": "number"}}, "required": ["title", "goal"]}
