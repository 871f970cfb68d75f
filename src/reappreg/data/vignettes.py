"""The six negative interpersonal vignettes of the sample dataset, and the phrase banks
the seeded generator composes reappraisals from.

The vignettes were written for this project. Human reappraisals and held-out answers
(GPT-4-0314-style and frontier opponents) are built from *disjoint* phrase banks: the
held-out texts must never share wording with training texts, exactly as the separation
guard demands of real data.

Each vignette has:
- ``details``: concrete scenario specifics a *specific* reappraisal refers to;
- ``alternatives``: benign alternative explanations of the other person's behaviour
  (what makes a reappraisal novel and effective), in the wording human authors use;
- ``heldout_alternatives``: the same idea space in different wording, used only for the
  held-out answers.
"""

from __future__ import annotations

VIGNETTES: list[dict] = [
    {
        "vignette_id": "v1",
        "title": "The unanswered birthday message",
        "emotion": "hurt",
        "scenario": (
            "You organised a small birthday dinner for your closest friend Maya and sent her a long, "
            "heartfelt message the night before. She read it but never replied, and at the dinner she "
            "spent most of the evening talking to other people."
        ),
        "details": ["the long message you sent Maya", "the birthday dinner you organised", "Maya talking to the other guests"],
        "alternatives": [
            "Maya felt too moved by your message to answer it properly in a text",
            "Maya was anxious about hosting everyone and tried to include each guest",
            "Maya planned to thank you in person once things were quieter",
        ],
        "heldout_alternatives": [
            "a heartfelt note can leave someone unsure how to respond in kind",
            "being the centre of a celebration often pulls a person in many directions",
            "your friend may be saving her thanks for a calmer moment with you",
        ],
    },
    {
        "vignette_id": "v2",
        "title": "Credit taken in the meeting",
        "emotion": "anger",
        "scenario": (
            "You spent two weekends building the analysis for your team's quarterly review. In the meeting "
            "with senior management, your colleague Daniel presented the key chart and said 'I found that' "
            "without mentioning you."
        ),
        "details": ["the two weekends you spent on the analysis", "the chart Daniel presented", "the quarterly review meeting"],
        "alternatives": [
            "Daniel was nervous in front of management and spoke carelessly",
            "Daniel used 'I' loosely to mean the team and did not notice how it sounded",
            "the managers already know who built the numbers from the shared files",
        ],
        "heldout_alternatives": [
            "people under pressure in front of executives often misspeak about ownership",
            "a slip of wording in a tense presentation is not necessarily a deliberate grab",
            "your work leaves a trail in the documents that others can see",
        ],
    },
    {
        "vignette_id": "v3",
        "title": "The cancelled weekend visit",
        "emotion": "disappointment",
        "scenario": (
            "Your brother Sam promised to visit for the weekend, and you cleaned the guest room and bought "
            "his favourite food. On Friday afternoon he cancelled with a one-line text saying something came up."
        ),
        "details": ["the guest room you prepared", "Sam's one-line text", "the favourite food you bought for him"],
        "alternatives": [
            "Sam is dealing with something stressful he is not ready to talk about yet",
            "Sam felt embarrassed about cancelling and kept the text short for that reason",
            "Sam may suggest a new date once his situation settles",
        ],
        "heldout_alternatives": [
            "a terse cancellation frequently hides a difficulty the sender feels awkward explaining",
            "short messages are sometimes written out of guilt rather than indifference",
            "the visit is postponed rather than lost, and can be rescheduled together",
        ],
    },
    {
        "vignette_id": "v4",
        "title": "Criticism at the family dinner",
        "emotion": "shame",
        "scenario": (
            "At a family dinner your aunt Rosa remarked, in front of everyone, that you still have not found "
            "a stable job and asked when you would finally settle down. A few relatives laughed."
        ),
        "details": ["aunt Rosa's remark at the table", "the relatives who laughed", "your search for a stable job"],
        "alternatives": [
            "Rosa worries about you and expressed it in a clumsy, old-fashioned way",
            "the relatives laughed out of awkwardness rather than at you",
            "Rosa's generation judged success by very different rules than yours",
        ],
        "heldout_alternatives": [
            "older relatives often voice concern through blunt questions they think are caring",
            "nervous laughter at a table usually releases tension instead of mocking anyone",
            "career paths today look nothing like the ones your aunt grew up with",
        ],
    },
    {
        "vignette_id": "v5",
        "title": "The roommate and the dishes",
        "emotion": "frustration",
        "scenario": (
            "For the third week in a row your roommate Lee left a pile of dirty dishes in the sink, even though "
            "you agreed on a cleaning rota. When you mentioned it, Lee shrugged and said they had been busy."
        ),
        "details": ["the pile of dishes in the sink", "the cleaning rota you agreed on", "Lee's shrug"],
        "alternatives": [
            "Lee is overwhelmed by exams or work and the rota slipped their mind",
            "Lee shrugged because they felt caught out and did not know what to say",
            "the rota may need adjusting to fit both of your schedules",
        ],
        "heldout_alternatives": [
            "household chores are usually the first thing to slip when someone is stretched thin",
            "a defensive shrug can be a sign of embarrassment more than of not caring",
            "an agreement made months ago may simply no longer match your routines",
        ],
    },
    {
        "vignette_id": "v6",
        "title": "Left out of the group trip",
        "emotion": "loneliness",
        "scenario": (
            "You found out from social media photos that four of your university friends went on a hiking trip "
            "together last weekend. Nobody had mentioned it to you or asked if you wanted to come."
        ),
        "details": ["the hiking photos you saw online", "the four friends on the trip", "last weekend's trip"],
        "alternatives": [
            "the trip was planned quickly by one friend who only messaged a few people",
            "your friends assumed you were busy because you mentioned a heavy month",
            "being left out this once says little about how much the friendship matters",
        ],
        "heldout_alternatives": [
            "spontaneous plans often come together through whoever happens to be in one chat",
            "friends sometimes hold back an invitation because they think you have no time",
            "a single missed invitation rarely reflects the strength of a long friendship",
        ],
    },
]

# --- Human-author phrase banks (training side). Levels 0/1/2 = poor/medium/good. ---
# Every level has a concise and a wordy way of saying it ("short"/"long"): an author's
# verbosity is drawn independently of their skill, so a long text can be a poor one
# (lecturing, rambling, clichés at length) and a short one good; the content decides the
# rating. How often a good part is the wordy one is a knob of the generator
# (data.sample.length_tilt): at 0 length ranks texts little better than chance.

HUMAN_EMPATHY = {
    0: {
        "short": [
            "Honestly, you are overreacting.",
            "This is really not a big deal.",
            "You need to toughen up a bit.",
            "Well, these things happen.",
        ],
        "long": [
            "Honestly, you are overreacting, and getting this worked up over something so ordinary only makes it worse for you and for everyone who has to hear about it.",
            "To be blunt, this is really not a big deal, and most people would have shrugged it off by now instead of turning it over and over in their heads for days.",
            "You need to toughen up a bit, because life is full of small letdowns like this one and nobody is going to tiptoe around your feelings forever.",
        ],
    },
    1: {
        "short": [
            "It is understandable to feel {emotion}.",
            "Anyone would feel some {emotion} here.",
            "Feeling {emotion} about this is normal.",
        ],
        "long": [
            "It is understandable to feel {emotion} in a situation like this one, and I think a lot of people in your place would probably feel something quite similar.",
            "Anyone would feel at least some {emotion} here, I suppose, since these kinds of things tend to get to people in one way or another.",
        ],
    },
    2: {
        "short": [
            "Your {emotion} makes sense.",
            "Of course {detail} stung.",
            "Your {emotion} shows you care.",
        ],
        "long": [
            "It makes complete sense that you feel {emotion} after {detail}, and that feeling deserves room before you decide what to do next.",
            "Your {emotion} is a real and fair response to {detail}, because it shows how much this relationship and your effort mean to you.",
            "Of course {detail} left you with {emotion}; you invested a lot of yourself in this, and it is fine to let that sink in.",
        ],
    },
}

HUMAN_REINTERPRETATION = {
    0: {
        "short": [
            "Everything happens for a reason, and this is no exception to that rule.",
            "Things will work out somehow, they always do in the end, so just relax.",
            "Just try to think positive and look on the bright side of things for once.",
            "Life goes on anyway, and there is no point dwelling on any of it now.",
        ],
        "long": [
            "The way I see it, everything in life happens for a reason, and if you just wait long enough the universe usually shows you what that reason was supposed to be.",
            "Try to think positive thoughts and remember that people are the way they are, so there is no use analysing it any further than that.",
            "At the end of the day life goes on anyway, and whatever happened here is just one of those things that everybody goes through at some point.",
        ],
    },
    1: {
        "short": [
            "Maybe there is another explanation for what happened here, who knows.",
            "Perhaps it was not meant the way it felt to you at the time it happened.",
        ],
        "long": [
            "Maybe there is another explanation for what happened, even if it is hard to say right now what exactly that explanation might turn out to be.",
            "There might be more going on than you can see right now, and things are not always exactly what they look like at first glance.",
        ],
    },
    2: {
        "short": [
            "Perhaps {alternative}.",
            "Maybe {alternative}.",
        ],
        "long": [
            "Perhaps {alternative}, which would mean this says more about their situation than about you.",
            "It is possible that {alternative}, so {detail} may not be the rejection it seems.",
            "Consider that {alternative}; then {detail} looks different.",
        ],
    },
}

HUMAN_GROWTH = {
    0: {
        "short": [
            "There is nothing you can really do about it now.",
            "You will probably keep thinking about it for a while.",
        ],
        "long": [
            "You will probably keep thinking about it for a while no matter what anyone says, and honestly there is not much you can really do about that.",
            "There is nothing you can really do except put up with it and hope that it does not keep happening to you over and over again.",
        ],
    },
    1: {
        "short": [
            "You could talk to them about it at some point soon.",
            "Maybe let it rest for a few days and see what happens.",
            "Try to give it some time before you decide anything.",
        ],
        "long": [
            "You could try to talk to them about it at some point if you feel like it, or otherwise just let it rest for a few days and see.",
        ],
    },
    2: {
        "short": [
            "Ask them calmly about {detail}.",
            "Tell them how {detail} felt.",
        ],
        "long": [
            "You can choose to ask them calmly about {detail}, which gives you a chance to understand instead of assume.",
            "Next time you can say how {detail} affected you, and that kind of honesty can bring the two of you closer.",
            "You can treat this as a chance to show yourself the same patience and warmth you would offer a good friend in your place.",
        ],
    },
}

# Rambling asides of verbose authors: they add length and no content (raters mark such
# texts down slightly).
HUMAN_FILLER = [
    "I have been going back and forth on how best to put this into words for you.",
    "I am not sure this is the right way to say it, but I will give it a try anyway.",
    "Sorry if this comes out a bit long, I tend to write more than I need to.",
]

# --- Held-out phrase banks (GPT-4-0314-style and opponents); no wording shared with the above. ---

HELDOUT_FRAMES = {
    "gpt-4-0314": [
        "Consider that {alternative}; seen this way, the situation could reflect their own pressures rather than how much they value you.",
        "While this stings, remember that {alternative}, and that gives you room to respond with curiosity.",
        "It may help to recognise that {alternative}, so a gentle conversation could clear the air.",
    ],
    "claude-3-opus": [
        "It's natural to be shaken by this, yet {alternative} — this moment may be less about you than it first seemed.",
        "What happened hurts, but {alternative}, and you get to decide what story you tell yourself about it.",
        "Try viewing it from their side: {alternative}, which leaves the door open for repair.",
    ],
    "gemini-1.5-pro": [
        "Reframing this: {alternative}, which suggests the behaviour was not a verdict on your worth.",
        "One kinder reading is that {alternative}; holding that possibility can soften the sting.",
        "Step back for a moment — {alternative}, and a calm check-in could reveal what really happened.",
    ],
}

# Extra held-out opponents get frames in the same style from this generic bank.
GENERIC_HELDOUT_FRAMES = [
    "An alternative view: {alternative}, so their actions need not define what you mean to them.",
    "Keep in mind that {alternative}; from there, you can choose a response that fits your values.",
    "A fairer reading might be that {alternative}, which invites understanding over blame.",
]
