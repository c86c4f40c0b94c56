"""Crisis messages: whether someone may be in danger, of what, in which language, and the lines that help
(docs/crisis.md).

``detect(message, vector, embedder)`` decides, offline, in three parts (the first two are ``rules``):

1. **the lexicon**: crisis expressions in English and Spanish, per kind, matched after the message is normalised
   (lower case, accents and curly quotes folded) and after its *safe* phrases are masked: idioms ("this bill is
   killing me", "I'm dying to know", "shoot me the address", "kill the lights", "suicide prevention training") and
   negations ("I'm not suicidal", "nobody is hurt"). A clear case needs no model (``matched_by: lexicon``);
2. **similarity**: the message's MiniLM vector (the one retrieval already computed: no second encoding) against
   curated crisis exemplars of each kind and non-crisis exemplars (``crisis_exemplars.yaml``; their vectors by the
   default model and precision are shipped beside it, ``crisis_exemplars.npz``, else embedded once per process and
   embedder, lazily: ``exemplar_matrix``). A crisis when the best crisis exemplar is close enough
   (``MIN_SIMILARITY``) *and* closer than the best non-crisis one by ``MIN_MARGIN`` (``matched_by: similarity``);
   a message that also asks for a program or service (``ASKING``: "my baby needs a crib"), or whose idiom or
   negation was masked, needs the wider ``MIN_MARGIN_ASKING``. The thresholds were chosen on the tuning split
   (examples/eval/crisis_tuning.yaml), never on the reported suite (examples/eval/crisis.yaml);
3. **the classifier** (``livemem.answer.crisis_model``): finds the paraphrases the rules missed (``matched_by:
   classifier``) and drops the rules' finds its veto model is sure are everyday messages ("my mom will kill me if
   im late"), in messages long enough to say so.

The kinds: ``suicide_self_harm``, ``overdose_poisoning``, ``violence_abuse``, ``medical_emergency``,
``child_in_danger``; a message may name several (``kinds``), the most urgent first (``KINDS``' order of urgency:
``URGENCY``). ``lines_for`` gives the help for them (988, 911, Poison Control, the National Domestic Violence
Hotline, Childhelp, the home state's own lines from ``STATE_LINES`` and the deployment's ``local`` lines), in the
message's language (``en``, ``es``); ``crisis_text`` writes them as the first lines of every answer.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from livemem.answer import crisis_model

KINDS = ("suicide_self_harm", "overdose_poisoning", "violence_abuse", "medical_emergency", "child_in_danger")
URGENCY = ("child_in_danger", "medical_emergency", "overdose_poisoning", "violence_abuse", "suicide_self_harm")
LANGUAGES = ("en", "es")
EXEMPLARS = Path(__file__).with_name("crisis_exemplars.yaml")

# Chosen on the tuning split (bench/crisis.py --tune; docs/crisis.md, "Thresholds").
MIN_SIMILARITY = 0.35
MIN_MARGIN = 0.14  # a message that asks for nothing else
MIN_MARGIN_ASKING = 0.27  # one that asks for a program or service (``ASKING``), or whose safe phrase was masked
MIN_MARGIN_SPANISH = 0.35  # a Spanish message: MiniLM is an English model, to which Spanish sentences look alike
ASKING = re.compile(
    r"\b(?:need|needs|help|where|how (?:do|can|much|to)|programs?|assistance|apply|class(?:es)?|cards?|appointments?|"
    r"check ?-?ups?|clinics?|services?|care|any|free|cheap|costs?|pay|paying|bills?|training|volunteers?|jobs?|exam|"
    r"counsel(?:ing|or|ors)|therap(?:y|ist)|support|groups?|lawyers?|attorneys?|medicine|remedy|tips|advice|hours|"
    r"ayuda|necesit\w*|donde|programas?|clases?|gratis|taller|cita|para)\b"
)


# --- normalising -------------------------------------------------------------------------------------------------------
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'", "\u201c": '"', "\u201d": '"'})


def normalise(message: str) -> str:
    """Lower case, accents folded ("bebé" → "bebe"), curly quotes straightened, runs of space made one."""
    text = unicodedata.normalize("NFKD", message.translate(_QUOTES).lower())
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(text.split())


# Common misspellings and texting forms of crisis words, folded before the lexicon is matched ("swalowed", "kiero").
SPELLING = {
    "swalowed": "swallowed", "swallowd": "swallowed", "swolled": "swallowed", "swalloed": "swallowed",
    "unconcious": "unconscious", "unconsious": "unconscious", "atack": "attack", "attak": "attack",
    "breathin": "breathing", "breating": "breathing", "brething": "breathing", "kiero": "quiero", "qiero": "quiero",
    "morirm": "morirme", "pils": "pills", "pillz": "pills", "bleding": "bleeding",
    "bleedin": "bleeding", "chokin": "choking", "cuttin": "cutting", "killin": "killing", "dyin": "dying",
    "hurtin": "hurting", "beatin": "beating", "hittin": "hitting", "thinkin": "thinking", "tryin": "trying",
    "gonna": "going to", "wanna": "want to", "gunna": "going to", "tryna": "trying to", "u": "you", "ur": "your",
    "r": "are", "bc": "because", "cuz": "because", "2nite": "tonight", "tonite": "tonight", "2day": "today",
    "rn": "right now", "pls": "please", "plz": "please", "bf": "boyfriend", "gf": "girlfriend", "hes": "he's",
    "shes": "she's", "isnt": "isn't", "wont": "won't", "cant": "can't", "dont": "don't", "didnt": "didn't",
    "doesnt": "doesn't", "wasnt": "wasn't", "havent": "haven't", "hasnt": "hasn't", "aint": "isn't",
    "seizureing": "seizing", "siezure": "seizure", "seisure": "seizure", "stoke": "stroke", "sucide": "suicide",
    "overdoze": "overdose", "poisen": "poison", "poisend": "poisoned", "strangeled": "strangled",
}  # fmt: skip
_SPELLING = re.compile(
    r"(?<![\w'])(?:" + "|".join(sorted(map(re.escape, SPELLING), key=len, reverse=True)) + r")(?![\w'])"
)


def spelled(text: str) -> str:
    """``text`` (normalised) with the common misspellings and texting forms of ``SPELLING`` folded; "to many"."""
    text = _SPELLING.sub(lambda m: SPELLING[m.group(0)], text)
    return re.sub(r"\bto (many|much) (?=\w)", r"too \1 ", text)


def _rx(*parts: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in parts))


ME = r"(?:my ?self|myslef|mysefl|mysef|meself|my self)"
IM = r"(?:i'?m|i am|im)"
HE = (
    r"(?:he|she|they|him|her|someone|somebody|a man|a guy|my (?:husband|wife|boyfriend|girlfriend|partner|ex|dad|"
    r"father|mom|mother|stepdad|stepfather|stepmom|son|brother|roommate|neighbou?r|uncle|cousin|bf|gf))"
)
CHILD = (
    r"(?:my|the|our|a|his|her|this|their|neighbou?r'?s) (?:\w+ )?(?:baby|babies|infant|newborn|toddler|child|children|"
    r"kids?|son|daughter|grandson|granddaughter|grandbaby|grandkids?|little (?:one|boy|girl)|boy|girl|niece|nephew|"
    r"stepson|stepdaughter|teen|teenager|grandchild|grandchildren|"
    r"\d+[- ]?(?:year|yr|month)[- ]?old)"
)
NINO = (
    r"(?:mi|el|la|nuestro|nuestra|su|mis|los|las) (?:bebe|nino|nina|ninos|ninas|hijo|hija|hijos|hijas|nene|nena|"
    r"chiquito|chiquita|nieto|nieta|nietos|sobrino|sobrina)"
)
PILLS = (
    r"(?:pills?|tablets?|meds|medicines?|medications?|sleeping pills|tylenol|advil|xanax|oxy\w*|percocets?|insulin|"
    r"heroin|fentanyl|lithium|benadryl|ibuprofen|aspirin|doses?|vicodin|klonopin|ambien|seroquel|gabapentin|"
    r"antidepressants?|painkillers?|pain pills|methadone|suboxone|cough syrup|cold medicine|nyquil|vitamins|"
    r"iron pills|edibles?|gummies|gummy|(?:\w+ )?(?:pressure|heart|anxiety|sleep|seizure|thyroid|diabetes) (?:pills|meds))"
)
TOXIC = (
    r"(?:bleach|antifreeze|drain cleaner|rat poison|poison|pesticide|weed ?killer|roundup|lighter fluid|gasoline|"
    r"lamp oil|cleaning (?:products?|supplies|solution)|laundry pods?|detergent(?: pods?)?|tide pods?|window cleaner|"
    r"ammonia|mothballs|button batter(?:y|ies)|a battery|windshield (?:washer )?fluid|paint thinner|"
    r"nail polish remover|mouthwash|lye|oven cleaner|toilet bowl cleaner|pine-?sol|rubbing alcohol|"
    r"hand sanitizer|mushrooms|cough syrup|vape juice|e-?liquid|nicotine|dishwasher pods?|magnets?|"
    r"batter(?:y|ies)|coins?|essential oils?|superglue|fertilizer)"
)
COTOXIC = (
    r"(?:cloro|lejia|veneno|raticida|anticongelante|detergente|gasolina|insecticida|limpiador|clorox|amoniaco|"
    r"pila|pilas|iman|imanes|jarabe)"
)

# --- safe phrases: masked before the crisis expressions are looked for --------------------------------------------------
THINGS = (
    r"(?:bills?|rent|heat|heating|cold|weather|job|work|shifts?|boss|prices?|costs?|commute|wait(?:ing)?|lines?|"
    r"traffic|back|feet|knees?|legs?|head|kids|homework|tax(?:es)?|payments?|insurance|gas|electric(?:ity)?|"
    r"propane|stress|this|that|it|inflation|groceries|debt|loans?|fees?|deductible|hours|schedule|budget|landlord|"
    r"paperwork|process|hold music|humidity|allergies|tooth|teeth|interest|mortgage|car payment|daycare costs?|"
    r"phone bill|water bill)"
)
IDIOMS = _rx(
    rf"\b{THINGS}\b(?:\s+\w+){{0,4}}?(?:\s+(?:is|are|was|were|keeps?|has been|have been|been)|'s|'re)\s+(?:\w+\s+)?"
    r"(?:killing|murdering) (?:me|us|my \w+)",
    rf"\b(?:killing|killed|kill) (?:{ME}|him ?self|her ?self|them ?selves) (?:working|to (?:pay|make|keep|get|find)|trying|at (?:work|the gym)|"
    r"with (?:work|overtime))",
    r"\b(?:killing|killed) (?:it|time)\b",
    r"\bkill (?:the|some|a few|an|my) (?:lights?|engine|time|music|tv|power|hours?|mood|weeds?|bugs?|roaches|mice|"
    r"rats|germs|mold)\b",
    r"\b(?:kill|killed|killing) (?:for|two birds)\b",
    r"\bkiller (?:deals?|prices?|sales?|app|views?|workout|headache)\b",
    r"\bkill switch\b",
    r"\bdying (?:to|for) (?:know|see|try|hear|find|get|learn|ask|go|have|meet|talk)\b",
    r"\b(?:die|died|dying|dead) (?:of|from) (?:embarrassment|shame|boredom|laughter|laughing|cringe|jealousy)\b",
    r"\b(?:phone|battery|car|truck|van|laptop|computer|tablet|plants?|grass|lawn|tv|fridge|freezer|furnace|heater|"
    r"engine|alternator|water heater|ac|air conditioner|printer|router|flowers|garden|tomatoes)"
    r"(?:\s+\w+){0,2}?\s+(?:died|is dying|is dead|are dying|are dead|went dead|just died|keeps dying|'s dead)",
    r"\bdead (?:battery|end|line|lines|phone|car|tired|bolt|zone|last|serious|wrong|broke)\b",
    r"\b(?:bored|tired|worried|sick|scared|freezing) to death (?:about|of|over) (?:paying|the|my|losing|this)",
    r"\bbored to death\b|\bsick and tired\b",
    r"\bshoot (?:me|us|you|him|her|them|over|across) (?:a|an|the|your|some|my|that|this)\b",
    r"\bshoot (?:me|us) (?:over )?(?:\w+ )?(?:text|email|message|line|note|call|link|number|address|info)\b",
    r"\b(?:photo|video) ?shoots?\b|\bshoot(?:ing)? (?:hoops|pool|baskets|photos|video|a video)\b|\bshooting star\b",
    r"\bsuicid\w* (?:prevention|awareness|hotline training|training|walk|squad|doors?|lane|king|prevent\w*|"
    r"survivors? group|loss (?:support|group)|bereavement|research|statistics|rates?)\b",
    r"\b(?:prevent(?:ing|ion of)?|prevention of) suicid\w*",
    r"\b(?:qpr|asist|gatekeeper|mental health first aid|narcan|naloxone|cpr|first aid|overdose (?:prevention|"
    r"response|reversal)|domestic violence|child abuse|human trafficking|de-?escalation)(?: \w+)? (?:training|class|"
    r"classes|course|certification|workshop|awareness|month|volunteers?|kits?|program for volunteers|event|seminar)\b",
    r"\boverdose (?:prevention|awareness|training|reversal|kits?|response)\b",
    r"\b(?:get|pick up|order|carry|find|where (?:is|can i get)|free) (?:some )?(?:free )?(?:narcan|naloxone)\b",
    r"\bnarcan (?:kits?|nasal spray|boxes|vending)\b",
    rf"\b(?:hurt|injured|cut) {ME} (?:at work|on the job|lifting|playing|while|when|falling|moving|shaving|cooking|"
    r"last (?:week|month|year)|a while ago|at the gym)",
    r"\b(?:i|i've|i have|i just|i think i) (?:\w+ )?(?:hurt|injured|broke|sprained|pulled|twisted) my "
    r"(?:back|knee|ankle|shoulder|wrist|hand|foot|leg|neck|arm|hip|toe|finger)\b|\b(?:he|she|they|my \w+|our \w+) "
    r"(?:\w+ )?(?:hurt|injured|broke|sprained|pulled|twisted) (?:his|her|their) (?:back|knee|ankle|shoulder|wrist|"
    r"hand|foot|leg|neck|arm|hip|toe|finger)\b",
    r"\bbeat (?:the|this|my|that) (?:deadline|rush|heat|traffic|crowd|crowds|system|odds|record|cold|price|line)\b",
    r"\bbeat(?:en)?[- ]up (?:old )?(?:car|truck|couch|van|sofa|shoes|furniture)\b|\bcan'?t beat (?:that|the|it)\b",
    r"\bhit (?:me|us) up\b|\bhit the (?:road|books|gym|store|hay)\b|\bhit (?:my|the|our) (?:limit|deductible|cap|"
    r"max|maximum)\b|\bhit hard by\b|\b(?:took|take|taking) a hit\b|\bhit by (?:the )?(?:storm|flood|flooding|"
    r"layoffs?|a bill|tornado|price)",
    r"\bfood poisoning\b|\bpoison (?:ivy|oak|sumac)\b",
    r"\bstroke of luck\b|\bcatch(?:ing)? my breath\b|\bbreathing (?:room|treatments?|machine|exercises)\b|"
    r"\bbreath of fresh air\b|\bchoking hazards?\b|\bheart attack (?:prices?|bill)\b",
    r"\bpass(?:ed|ing)? out (?:flyers|fliers|food|leaflets|papers|candy|the \w+|flu shots|coats|blankets)\b",
    r"\bin danger of (?:\w+ing|eviction|foreclosure|shut-?off|disconnection|being evicted)\b",
    r"\b(?:ambulance|er|emergency room|hospital|911) (?:bills?|ride bills?|charges?|fees?|debt|invoice)\b",
    r"\b911 (?:dispatcher|operator|call center)s?\b|\bnon-?emergency\b",
    r"\bmy heart (?:is )?(?:broken|breaking|goes out)\b|\bheartbroken\b",
    r"\blocked (?:me|us) out\b",
    r"\bcarbon monoxide (?:detectors?|alarms?) (?:for|program|free|install\w*)\b|\bfree carbon monoxide\b",
    r"\bdrop dead\b|\bover my dead body\b|\bdead ?beat\b|\bdeadlines?\b",
    r"\bhit (?:the|a) (?:jackpot|lottery|deer|pothole|curb|wall at work|snooze)\b|\bhit it off\b",
    r"\bthreat\w* to (?:break up|leave|divorce|evict|fire|sue|quit|report|cut off|take away|move out|tow)\b",
    r"\b(?:had|survived|recovering from|recovered from|history of) (?:a |an |his |her |my )?(?:heart attack|stroke|"
    r"seizures?|overdose|cardiac arrest|aneurysm)(?: \w+){0,2}? (?:last|in (?:19|20)\d\d|in (?:january|february|march|"
    r"april|may|june|july|august|september|october|november|december)|years? ago|months? ago|a (?:few|couple)|"
    r"back in|since)\b|\b(?:tuvo|le dio) (?:un |una )?(?:derrame|infarto|embolia) (?:el ano pasado|hace)\b",
    r"\b(?:poison control|control de envenenamientos)(?: \w+){0,6}? (?:magnets?|stickers?|imanes?|fridge|"
    r"refrigerator|refrigerador|refri|nevera|contacts|wallet|for new parents|to keep|to save|para (?:tener|guardar))\b",
    r"\b(?:took|take|taking|tomo|tome) (?:my|his|her|mis|sus) (?:usual |regular |daily |morning |night )?(?:pills|"
    r"meds|medicines?|medications?|insulin|pastillas|medicinas) (?:this morning|today|tonight|"
    r"every (?:day|morning|night)|as prescribed|on time|already|esta manana|hoy|todos los dias)\b",
    r"\b(?:tome|tomo|ya tome) mis (?:pastillas|medicinas)\b",
    r"\b(?:having|have|had|gonna have|going to have|give me|gave me|giving me) (?:a )?(?:heart attack|stroke) "
    r"(?:over|about|when|at|from|looking|lol)\b",
    r"\b(?:cuenta|factura|cobro|deuda|pago)s? (?:de|del|por) (?:la |el )?(?:ambulancia|hospital|sala de "
    r"emergencias|emergencia)\b",
    # Spanish
    r"\bme muero de (?:hambre|frio|calor|ganas|risa|sueno|cansancio|aburrimiento|verguenza|curiosidad|la risa)\b",
    r"\bmuert[oa]s? de (?:cansancio|hambre|frio|calor|risa|sueno|miedo de perder)\b",
    r"\b(?:la|esta|el|este|mi|estas|estos) (?:factura|facturas|cuenta|cuentas|renta|calor|frio|trabajo|espalda|"
    r"deuda|deudas|luz|precios?|alquiler|jefe|rodilla|cabeza|pies)(?:\s+\w+){0,3}?\s+me (?:esta |estan )?"
    r"(?:matando|mata|matan)\b",
    r"\bme (?:esta |estan )?(?:matando|mata|matan) (?:el|la|los|las|este|esta|estos) (?:calor|frio|renta|factura|"
    r"facturas|cuenta|cuentas|trabajo|espalda|precios?|deudas?|luz|alquiler|jefe|pies|rodilla|cabeza)\b",
    r"\bme mata(?:n)? (?:de )?(?:la )?risa\b",
    r"\b(?:prevencion|prevenir) (?:del |el |de )?suicidio\b|\bsuicidio (?:prevencion|capacitacion|taller)\b",
    r"\b(?:capacitacion|taller|charla|curso|voluntari\w*|clase) (?:\w+ ){0,5}(?:violencia|maltrato|abuso|suicidio|"
    r"sobredosis|naloxona|narcan|primeros auxilios|rcp)\b",
    r"\b(?:mandame|enviame|pasame|mandeme|envieme|pasenme|mandenme)\b",
    r"\ben peligro de (?:perder|desalojo|que|quedarme|ser desalojad\w*)\b",
    r"\bintoxicacion (?:alimentaria|por alimentos)\b",
    r"\bya no aguanto (?:mas )?(?:el|este|esta|la|los) (?:calor|frio|dolor de|renta|factura|facturas|trafico|ruido)\b",
)
NEGATIONS = _rx(
    rf"\b(?:not|never|wouldn'?t|would never|won'?t|will never|am not|{IM} not|no longer|don'?t|do not|not at all)"
    rf"(?: \w+)? (?:going to |gonna |want to |wanna |planning to |thinking of )?(?:be )?(?:suicidal|kill(?:ing)? "
    rf"{ME}|hurt(?:ing)? {ME}|harm(?:ing)? {ME}|end(?:ing)? my life)\b",
    r"\b(?:no ?one|nobody|no one's) (?:is |was |got |has been )?(?:hurt|injured|in danger|harmed|bleeding)\b",
    r"\b(?:not|isn'?t|is not|it'?s not) (?:an? )?(?:emergency|life or death)\b",
    rf"\b(?:{IM}|we'?re|we are|he'?s|she'?s|they'?re) not in (?:any )?danger\b",
    r"\bno (?:es|hay) (?:una )?emergencia\b|\bno (?:estoy|estamos|esta) en peligro\b|\bno soy suicida\b",
    r"\b(?:not|never) (?:been )?abused\b",
    r"\blost (?:someone|somebody|\w+|my \w+|a \w+) to suicide\b|\bsuicide (?:loss|survivors?)\b|"
    r"\b(?:died|death|passed away) (?:by|from|of) suicide\b",
    r"\bvolunteer(?:ing|s)? (?:at|for|with) (?:the|a|our) (?:\w+ ){0,2}shelter\b|\bdonat\w* (?:to|for) (?:the|a) "
    r"(?:\w+ ){0,2}shelter\b",
    r"\bchoking on (?:all )?(?:the |my |her |his )?(?:homework|costs?|prices?|bills?|debt|work|paperwork)\b|"
    r"\bswallow(?:ed|ing)? (?:his|her|my|their|our) pride\b",
)

# --- crisis expressions ----------------------------------------------------------------------------------------------
LEXICON: dict[str, re.Pattern[str]] = {
    "suicide_self_harm": _rx(
        rf"\bkill?(?:ing|ed)? {ME}\b|\bkms\b|\bunalive\b|\bkill(?:ing|ed)? (?:him|her|them) ?sel(?:f|ves)\b",
        r"\bend(?:ing)? (?:his|her|their) (?:own )?life\b|\b(?:the|a) rope (?:is )?ready\b|\bnoose\b|\bsleep forever\b",
        r"\b(?:if|when) i(?:'m| am| was| were) (?:gone|dead)\b|\bsee the point (?:of|in) (?:living|life|going on)\b",
        r"\bsaying (?:goodbye|good bye) to (?:everyone|everybody|my family|you all|the world)\b|"
        r"\b(?:would it take|does it take|enough) to (?:die|kill me)\b|\blethal dose\b",
        r"\bsu?i?c[iu]d\w*|\bsuisid\w*|\bsuiscid\w*|\bsucid\w*|\bsuicd\w*|\bsuicde\w*",
        r"\b(?:end|ending|ended|take|taking|took) (?:my|my own) (?:life|live)\b",
        r"\bend(?:ing)? (?:it|things|everything) (?:all|tonight|today|now|for good)\b|\bend it all\b",
        r"\b(?:want|wanted|wants|wanna|going|gonna|ready|about|trying|tried|plan|planning) (?:to )?(?:die|be dead|"
        r"not exist|not be here|not be alive|disappear forever|stop existing|stop living|stop being alive)\b",
        r"\b(?:done|finished) with (?:life|living|this life|being alive)\b|\bwant out of (?:this|my) life\b|"
        r"\bways to (?:die|kill myself|end it)\b|\b(?:if|when) i (?:was|were|am) dead\b|\bsaving (?:up )?(?:my )?"
        r"(?:pills|meds)\b|\bwish (?:a|the|some) (?:car|truck|bus|train|someone|somebody) would (?:hit|kill) me\b",
        r"\b(?:wish|wished|wishing) (?:that )?(?:i|i'd) (?:was|were|had|could|would|wasn'?t|weren'?t|never|just)? ?"
        r"(?:dead|die|gone|never been born|not alive|not here|not wake up|go to sleep and)",
        r"\b(?:go|going|went|fall|falling|fell) (?:to )?sleep and (?:not|never|don'?t|wouldn'?t) wak(?:e|ing) up\b",
        r"\b(?:not|never) wak(?:e|ing) up (?:again|ever|anymore|tomorrow)\b",
        r"\bbetter off (?:dead|without me|gone|if i (?:was|were|wasn'?t) (?:gone|dead|here|around))\b",
        r"\b(?:don'?t|do not|dont|no longer|doesn'?t|do not even) (?:really )?(?:want|wanna|wish|care) (?:to )?"
        r"(?:live|be alive|exist|be here|wake up|go on|keep going|keep living|be around|stay alive)\b",
        r"\b(?:no|any|lost (?:my|the|all)|what(?:'s| is) the) (?:reason|point|will) (?:for me )?(?:to|in|of) (?:live|living|going on|"
        r"being alive|stay(?:ing)? alive|keep(?:ing)? going|wake up|waking up)\b",
        r"\b(?:can'?t|cannot|cant|can not) (?:go on|keep going|keep living|live like this|do life)\b",
        rf"\b(?:hurt|hurting|harm|harming|cut|cutting|burn|burning|punish|punishing|starve|starving|drown|hang|"
        rf"hanging|shoot|shooting|poison|poisoning|stab|stabbing|suffocate) {ME}\b",
        r"\bself[- ]?(?:harm\w*|injur\w*|destruct\w*)\b|\bcutting again\b|\bstarted cutting\b",
        r"\bjump(?:ing)? (?:off|from|in front of) (?:a|the|this|that)(?: \w+){0,3}? (?:bridge|roof|building|overpass|train|cliff)\b",
        r"\b(?:slit|slitting|slice|cut|cutting) (?:my|his|her) (?:wrists?|arms?|legs?|thighs?|skin)\b",
        r"\b(?:life|living)(?: is| isn'?t| is not|'s not) (?:not )?worth (?:it|living)\b|\bnot worth living\b|"
        r"\bnothing to live for\b",
        r"\b(?:suicide|goodbye|good bye) (?:note|letter)s?\b|\bwrote (?:a|my) (?:goodbye|last) (?:note|letter)\b",
        r"\b(?:thoughts? (?:of|about)|thinking (?:of|about)|think(?:ing)? a lot about|planning) (?:dying|death|"
        r"ending (?:it|my life|things)|killing|not being here|my funeral)\b",
        rf"\bgun (?:to my head|in my mouth)\b|\b(?:use|used|using) (?:it|them|that|the \w+) on {ME}\b",
        rf"\b{IM} (?:such )?a burden\b|\beveryone would be (?:better|happier) (?:off )?(?:without me|if i)",
        r"\bdie (?:tonight|today|soon|in my sleep)\b|\bwant it (?:all )?to (?:end|be over|stop)\b",
        r"\bdon'?t want to be (?:here|alive) (?:any ?more|now)\b|\btired of (?:living|being alive|life)\b",
        r"\bdisappear (?:forever|for good)\b|\bgive away (?:all )?my (?:stuff|things)\b",
        r"\b(?:bought|got|have|found|tied|tying|hung|hanging) (?:a |the |some )?rope\b|\bhang(?:ing)? myself\b|"
        r"\b(?:belt|rope|cord|sheet|scarf|wire|extension cord) (?:a?round|on) (?:his|her|their|my) (?:own )?neck\b|"
        r"\b(?:found|saw) (?:him|her|them|(?:my|our|his|her|their) \w+) hanging\b(?! out)|\bhung (?:him|her|them)sel(?:f|ves)\b|"
        r"\b(?:pills|meds|pastillas)(?: \w+){0,2}? (?:lined up|counted out|ready|in front of me|listas)\b",
        r"\b(?:how|when|where) (?:i'?m|i am|im|i will|i'll) (?:going to |gonna )?do it\b|\b(?:do|doing) it tonight\b|"
        r"\bfinally do it\b",
        r"\b(?:because|since|after|once) i (?:won'?t|will not|am not going to) be (?:around|here|alive)\b|"
        r"\bwhen i'?m not (?:around|here) anymore\b|\b(?:in case|if) i (?:don'?t|do not) make it\b",
        r"\b(?:step|walk|jump|throw myself|run|lie down|lay down)(?:ing)? (?:out )?in front of (?:a|the) (?:train|"
        r"truck|bus|car|semi)\b|\bdriv(?:e|ing) (?:my (?:car|truck) )?(?:into|off) (?:a|the) (?:tree|wall|bridge|"
        r"cliff|river|pole|lake|overpass)\b|\bcrash(?:ing)? my (?:car|truck) on purpose\b",
        r"\b(?:only|no other) way out\b|\bway out (?:except|but|other than) (?:dying|death|to die)\b|"
        r"\b(?:picturing|imagining|planning) my (?:own )?funeral\b|\bsleep and never (?:come back|wake up)\b|"
        r"\b(?:standing|sitting) on (?:the|a) (?:bridge|ledge|roof)\b|\b(?:sitting|here) with (?:the|my|his) gun\b|"
        r"\bloaded (?:my|the|his|my dad'?s|my dads) (?:gun|pistol|rifle)\b|\bwant to (?:join|be with) (?:him|her|"
        r"them) (?:again|in heaven)\b|\bthe pain to stop forever\b|\bnotice if i (?:was|were|am) gone\b",
        r"\b(?:burn|burning|burned|hit|hitting|punch|punching|scratch|scratching) myself\b|\b(?:my|myself)\b.{0,40}"
        r"\b(?:till|until) (?:they|it|i) (?:bleed|bleeds|bled)\b",
        # Spanish
        r"\b(?:quiero|quisiera|me quiero|deseo|voy a|pienso(?: en)?|pensando en|ganas de|me dan ganas de) (?:morir(?:me)?|"
        r"matarme|suicidarme|desaparecer|quitarme la vida|acabar con (?:mi vida|todo)|dejar de vivir|no despertar)",
        r"\bme (?:quiero|voy a|puedo) (?:morir|matar|suicidar)\b|\bmatarme\b|\bquitarme la vida\b|\bme matar(?:e|ia)\b",
        r"\b(?:me quito|me voy a quitar|me quiero quitar|se va a quitar|se quiere quitar|quitarse) la vida\b",
        r"\b(?:desearia|quisiera|prefiero|ojala) (?:estar muert[oa]|me muera|morirme|no despertar)\b|\bojala "
        r"estuviera muert[oa]\b|\bdormir(?:me)? para siempre\b",
        r"\bno (?:quiero|deseo) (?:seguir )?(?:vivir|viviendo|estar viv[oa]|despertar|existir|seguir aqui|estar aqui)",
        r"\b(?:hacerme|me hago|me hice|me estoy haciendo|hacerme mas) dano\b|\blastimarme\b|\bme lastimo\b",
        r"\bme (?:quiero|voy a|puedo|quisiera) hacer (?:mucho )?dano\b",
        r"\b(?:cortarme|me corto|me corte|me estoy cortando|cortandome)\b",
        r"\b(?:mejor|preferiria) (?:estar|estaria) muert[oa]\b|\bestaria(?:n)? mejor (?:muert[oa]|sin mi)\b|"
        r"\bmejor muert[oa]\b|\bmejor sin mi\b",
        r"\bya no (?:aguanto|puedo|quiero) (?:mas|vivir|seguir|con esto|con mi vida)\b|\bno aguanto mas\b",
        r"\bno vale la pena (?:vivir|seguir)\b|\bacabar con (?:mi vida|todo)\b|\bterminar con (?:mi vida|todo)\b",
        r"\bdormir(?:me)? y no despertar\b|\bno despertar (?:nunca|mas)\b",
        r"\b(?:sin|no tengo|no hay) (?:razon|razones|motivos?|ganas) (?:para|de) vivir\b|\bsoy una carga\b",
        r"\b(?:tirarme|aventarme|lanzarme|arrojarme) (?:de |desde |a |por )?(?:un |una |el |la |las |los |del |al )?"
        r"(?:puente|edificio|techo|vias|tren|balcon|ventana)\b|\bpegarme un tiro\b|\bcarta de despedida\b|"
        r"\bnota (?:de )?suicid\w*\b|\bdespedirme de (?:todos|mi familia)\b|"
        r"\bahorcarme\b|\bme quiero ir para siempre\b",
        # a conditional or dated "me mato" ("si no hay lugar hoy me mato", "si me corren me mato", "hoy me mato"),
        # not the idioms "me mato trabajando / de risa / estudiando" nor "ya me mato (mató) este calor"
        r"(?:\bsi\b[^.!?;]{0,60}?|\b(?:hoy|esta noche|manana|ahorita) )\bme mato\b"
        r"(?! (?:trabajando|estudiando|de|a|por|con|en|haciendo|limpiando)\b)",
    ),
    "overdose_poisoning": _rx(
        r"\bover ?dos\w*|\boverdoes\w*|\bod'?(?:d|ed|ing)\b|\bod(?:ing)? on\b|\bo\.d\.",
        rf"\b(?:took|taken|take|swallowed|ate|had|popped|taking|took like|took about) (?:too (?:many|much)|a (?:whole|"
        rf"full|entire) (?:bottle|pack|box|sheet|jar)|a (?:bunch|handful|lot|ton|bottle|box|pack|jar|sheet) of|the (?:whole|rest of the) (?:bottle|pack|box)|a double|a triple|all (?:of )?(?:my|his|her|the|"
        rf"their)|way too (?:many|much)|double|triple|extra|\d+|twenty|thirty|forty|fifty|several|like \d+)"
        rf"(?: [\w']+){{0,4}}? {PILLS}\b",
        rf"\b(?:took|taken|has taken|gave (?:him|her|them)) (?:\w+ ){{0,2}}{PILLS} (?:twice|two times|three times|"
        r"again by mistake)\b|\b(?:bottle|pack|box|handful) of (?:\w+ ){0,2}(?:pills|meds|tylenol|advil|"
        r"cough syrup|xanax)\b.{0,30}\b(?:on purpose|to die|and (?:is|won'?t|can'?t))",
        r"\bmix(?:ed)? (?:\w+ ){0,2}?(?:bleach|cloro|ammonia|amoniaco)(?: \w+){0,3}? (?:and|with|con|y) (?:\w+ )?"
        r"(?:ammonia|vinegar|amoniaco|vinagre|bleach|cloro|other cleaners?|cleaner|toilet bowl cleaner|acid)\b|"
        r"\bmezcl\w* (?:\w+ )?(?:cloro|amoniaco)\b|\b(?:breathed|breathing|inhaled) (?:in )?(?:the )?(?:fumes|"
        r"chlorine gas)\b",
        r"\b(?:co|carbon monoxide) (?:alarm|detector)s? (?:is |are |just |keeps )?(?:went off|goes off|going off|"
        r"beeping|sounding)\b|\b(?:there is|there'?s|theres|smell|leak(?:ing)?|hay) (?:carbon monoxide|a gas leak|"
        r"monoxido de carbono|gas)\b.{0,50}\b(?:dizzy|headaches?|nause\w*|vomit\w*|sleepy|passed out|sick|"
        r"confused|mareados?|dolor de cabeza|desmay\w*|throwing up|puking|passing out|nauseous|vomitando)|\b(?:dizzy|headaches?|nause\w*|vomit\w*|passed out|"
        r"mareados?)\b.{0,50}\b(?:carbon monoxide|co alarm|monoxido de carbono)\b",
        r"\bneedle (?:still )?in (?:his|her|their|my) arm\b|\b(?:snorted|smoked|shot up|injected) (?:something|"
        r"some|a pill|fentanyl|heroin|dope)\b",
        rf"\b(?:drank|drink|drinking|swallowed|swallow|ate|eaten|ingested|inhaled|got into|into the|sipped|chugged|"
        rf"licked|bit into|chewed)(?: \w+){{0,3}}? {TOXIC}\b",
        r"\bpoisoned\b|\bpoisoning\b|\bpoison control\b",
        r"\b(?:needs?|needed|give|gave|giving|used|use|using|have|had to use|hit (?:him|her) with) (?:the )?(?:narcan|naloxone)\b",
        r"\b(?:mixed|mixing|took|take) (?:\w+ )?(?:pills|alcohol|xanax|benzos|drugs|meds|opioids)(?: and| with) "
        r"(?:alcohol|pills|xanax|benzos|drugs|meds|opioids|vodka|beer|liquor|booze)\b",
        r"\b(?:shot|shooting) up\b.{0,40}\b(?:not breathing|blue|unresponsive|won'?t wake|passed out)\b",
        r"\b(?:not breathing|unresponsive|won'?t wake up|turning blue|blue lips|lips are blue|passed out)\b"
        r".{0,40}\b(?:after|from) (?:using|taking|shooting|drugs|pills|heroin|fentanyl|dope|meds)\b",
        r"\bcarbon monoxide (?:alarm|detector)s? (?:is |are )?(?:going off|beeping|sounding)\b|"
        r"\bcarbon monoxide poisoning\b",
        r"\b(?:too much|way too much) (?:fentanyl|heroin|dope|insulin|methadone|tylenol|acetaminophen)\b|"
        r"\btook (?:too much of )?something\b|\boverdid it with\b",
        # Spanish
        r"\bsobredosis\b|\benvenen\w*\b|\bintoxicad[oa]s?\b|\bintoxicacion\b|\bcontrol de (?:envenenamientos?|intoxicaciones|venenos)\b",
        rf"\b(?:tome|tomo|se tomo|me tome|trago|se trago|me trague|bebio|bebi|se bebio|comio|se comio|ingirio|"
        rf"mordio|chupo|me tome como)(?: \w+){{0,4}}? {COTOXIC}\b",
        r"\b(?:demasiadas|muchas|todas (?:las|mis|sus)|(?:un|todo el|el) (?:frasco|bote|pomo|blister)(?: entero)? de|"
        r"toda la caja de|un monton de|un punado de|"
        r"un puno de|el doble de) (?:\w+ )?(?:pastillas|pildoras|medicinas|medicamentos|tabletas|insulina)\b",
        r"\b(?:se|me) (?:tomo|tome|trago|trague)(?: \w+){0,2}? (?:pastillas|pildoras|medicinas|medicamentos) "
        r"(?:de|para)\b",
        r"\b(?:necesita|necesito|le di|usar|usamos|ponerle) (?:la )?(?:narcan|naloxona)\b",
    ),
    "violence_abuse": _rx(
        rf"\b{HE}(?: \w+){{0,4}}? (?:beat|beats|beating|hit|hits|hitting|punch(?:es|ed|ing)?|slap(?:s|ped|ping)?|"
        r"chok(?:e|es|ed|ing)|strangl\w*|kick(?:s|ed|ing)?|shov(?:e|es|ed|ing)|rap(?:e|ed|es|ing)|stab(?:s|bed)?|"
        r"attack(?:s|ed|ing)?|threaten(?:s|ed|ing)?|hurt(?:s|ing)?|abus(?:e|es|ed|ing)|assault(?:s|ed|ing)?|"
        r"touch(?:es|ed)|burn(?:s|ed)|bit|bites|drag(?:s|ged)|thr[eo]w(?:s)?|grab(?:s|bed)|pin(?:s|ned)|"
        r"tied|tie[sd]?|pushed|pushes|pushing|knocked|smack(?:s|ed)?|whoop(?:s|ed)?|slams?|slammed) (?:me|us)\b",
        r"\b(?:will|'ll|going to|gonna|wants? to|threaten\w* to|tried to|trying to|try to|about to|is coming to|"
        r"come(?:s)? (?:back )?to|swore (?:he|she|they)(?:'d| would)|said (?:he|she|they)(?:'d| would| will|'ll| is "
        r"going to| was going to)|says (?:he|she|they)(?:'ll| will| is going to)?)\s+(?:\w+\s+)?(?:kill|hurt|shoot|"
        r"stab|murder|strangle|choke|beat|rape|burn|find|get) (?:me|us)\b",
        r"\b(?:was|been|got|being|get|getting|gets) (?:\w+ )?(?:beat(?:en)?(?: up)?|raped|sexually assaulted|"
        r"assaulted|abused|attacked|stabbed|choked|strangled|molested|trafficked|jumped|shot at|punched|slapped|"
        r"kicked|threatened|hit by (?:him|her|my \w+)|hurt by (?:him|her|my \w+))\b",
        r"\bdomestic (?:violence|abuse|assault|dispute)\b|\bdv shelter\b|\bintimate partner violence\b",
        r"\bin danger\b|\bnot safe (?:at home|here|with (?:him|her|them|my))\b|\bunsafe at home\b",
        r"\b(?:afraid|scared|terrified|fear(?:ful)?)(?: \w+){0,2}? (?:for my life|(?:he|she|they)(?:'ll| will| is "
        r"going to| might| could| is gonna| wants to)(?: \w+)? (?:hurt|kill|find|hit|beat|come back))\b|"
        r"\bfear(?:ing)? for my life\b|\bscared for my life\b",
        r"\b(?:hide|hiding|hid|get away|getting away|escape|escaped|run|running|ran) (?:\w+ ){0,4}?from (?:him|her|them|my (?:husband|wife|boyfriend|girlfriend|"
        r"partner|ex|abuser|dad|father))\b|\bwon'?t let me (?:leave|go|out)\b|\blocked me in\b",
        r"\b(?:stalking|stalks|stalked|following|follows) me\b|\bstalker\b",
        rf"\b{HE} (?:has|have|got|is holding|is pointing|is waving|pulled|pulled out|grabbed|came at me with) "
        r"(?:a|his|her) (?:gun|knife|weapon|bat|machete)\b|\bpointing a gun at\b|\bholding a knife to\b",
        r"\b(?:breaking|broke|trying to break|tried to break) (?:in|into (?:my|our|the) (?:house|home|apartment|"
        r"trailer|place))\b|\bsomeone (?:is )?(?:in|inside) (?:my|our) (?:house|home|apartment)\b",
        r"\bhuman trafficking\b|\btrafficked\b|\bsex traffick\w*\b",
        r"\b(?:showed up|came over|is here|is outside|came back|came at me) with (?:a|his|her) (?:gun|knife|weapon|bat)\b|"
        r"\bthr(?:ew|ows|owing) (?:\w+ ){0,2}at me\b|\bsaid i'?m next\b",
        r"\b(?:with|has|holding) a (?:gun|knife|weapon|machete) (?:outside|at|in|near|by) (?:my|our|the) (?:house|home|"
        r"door|window|apartment|work|car|trailer)\b",
        r"\b(?:abusive|violent) (?:husband|wife|partner|boyfriend|girlfriend|relationship|ex|home|dad|father|"
        r"mom|mother|son|marriage)\b|\babuser\b",
        r"\b(?:being|been|am|is) abused\b|\babuses? me\b|\braped me\b|\braped\b",
        r"\b(?:put|held|holds|holding|had|pressed|wrapped|squeezed|grabbed|choked) (?:his|her|their|a|the|both)? ?"
        r"(?:hands?|knife|gun|pistol|blade|arms?|fingers?|belt|cord|rope) (?:around|to|on|against|at|into) (?:my|our) "
        r"(?:neck|throat|head|face|chest|back)\b|\b(?:grabbed|held|dragged|lifted|pinned|threw) me (?:by|against|to|"
        r"into|across|on) (?:the|my) (?:neck|throat|hair|wall|floor|ground)\b|\bsqueez\w* my (?:neck|throat)\b",
        r"\b(?:pulled|pointed|drew|aimed) (?:a|his|her|their) (?:gun|knife|blade|pistol|rifle|bat|weapon) (?:on|at) "
        r"(?:me|us|my \w+)\b|\bdeath threats?\b|\bthreat(?:s|ened)? to (?:kill|shoot|hurt)\b",
        rf"\b(?:{HE}|aide|caregiver|caretaker|nurse|staff) (?:\w+ ){{0,2}}(?:broke|fractured|cracked|busted|bruised) my "
        r"(?:arm|nose|ribs?|jaw|wrist|hand|leg|face|lip|eye|tooth|teeth|finger)\b",
        r"\b(?:aide|caregiver|caretaker|nurse|staff|worker|home health)\b(?: \w+){0,6}? (?:is |are |keeps )?(?:hit\w*|"
        r"beat\w*|slap\w*|abus\w*|hurt\w*|push\w*|shov\w*|steal\w*|stole|neglect\w*|threaten\w*|starv\w*|"
        r"lock\w*|tak(?:es|ing) (?:my|her|his) (?:money|check|social security|pills|benefits))\b",
        r"\b(?:is|are|keeps|has been|was) (?:hitting|beating|slapping|abusing|choking|kicking|punching|raping|"
        r"molesting|strangling) (?:her|him|them|my (?:mom|mother|dad|father|grandma|grandmother|grandpa|grandfather|"
        r"sister|brother|aunt|wife|husband|friend|girlfriend|boyfriend|neighbou?r|roommate))\b",
        r"\b(?:takes|took|taking|steals|stole|keeps) (?:all )?(?:my|her|his) (?:money|social security|ssi|check|"
        r"benefits|pension)\b.{0,40}\b(?:won'?t|doesn'?t|does not|will not) let\b|\bwon'?t let (?:me|her|him) (?:eat|"
        r"sleep|see|call|use the phone|talk to|have (?:my|her|his))\b",
        r"\b(?:keeps|kept|took|takes|has|is holding|won'?t give (?:me )?back) (?:my|our) (?:passport|id|papers|"
        r"documents|visa|green card)\b|\b(?:makes|made|forces|forced|forcing) (?:me|us) (?:to )?(?:work (?:without|"
        r"for no) pay|have sex|sleep with|sell (?:myself|sex|drugs|my body))\b|\bforced (?:himself|herself|themselves) "
        r"on (?:me|her|him)\b|\bforced me to\b",
        r"\b(?:my ex|he|she|a man|someone|some guy)(?: \w+){0,2}? (?:keeps|kept|won'?t stop) (?:showing up|following|"
        r"watching|waiting outside|driving by|tracking)\b|\btracks? my (?:phone|location|car)\b",
        r"\b(?:scared|afraid|terrified) (?:to go|of going|to be|to stay) (?:home|back home|alone with (?:him|her|my \w+))\b",
        r"\b(?:he|she|they) (?:said|says|told me) (?:he|she|they)(?:'d| would| will|'ll| is going to| was going to) "
        r"kill me\b|\bkill me (?:when|if|tonight)\b|\b(?:going|gonna) kill (?:me|us)\b",
        # Spanish
        r"\b(?:me|nos) (?:pega|pego|pegan|golpea|golpeo|golpean|golpearon|maltrata|maltrato|maltratan|"
        r"viola|violo|ahorca|ahorco|patea|pateo|empuja|empujo|lastima|lastimo|ataco|ataca|quiere matar|"
        r"va a matar|quiere pegar|va a pegar|va a golpear|quiere golpear|esta golpeando|esta pegando|persigue|"
        r"acosa|encerro|encierra|encierran|encerraron|tiene encerrad[oa])\b",
        r"\b(?:dijo|dice|jura|juro|amenaza con|amenazo con) (?:que )?(?:me )?(?:va a |iba a )?(?:matar|matara|"
        r"matarme|mataria|pegar|pegarme|lastimar|lastimarme|golpear|golpearme)\b",
        r"\bviolencia (?:domestica|de genero|familiar|intrafamiliar)\b|\bmaltrato (?:domestico|familiar)\b",
        r"\bme amenaz\w* (?:con (?:matar|pegar|lastimar|golpear|hacer\w* dano|un arma|una pistola|un cuchillo)|de muerte)",
        r"\btengo miedo (?:de|a|que) (?:mi (?:esposo|esposa|pareja|novio|novia|ex|papa|padre|marido)|el|ella|que me)",
        r"\b(?:abusa|abuso|abusan|abusaron) de mi\b|\bestoy en peligro\b|\ben peligro\b|\bme violaron\b",
        r"\b(?:mi (?:esposo|esposa|pareja|novio|novia|ex|marido|papa|padrastro))(?: \w+){0,3}? (?:me )?(?:pega|golpea|"
        r"maltrata|amenaza|lastima|abusa)\b|\btiene (?:una|un) (?:pistola|arma|cuchillo)\b",
        r"\bme (?:apret\w*|agarr\w*|sujet\w*|tom\w*) (?:del|el|de la|la) (?:cuello|garganta)\b|\b(?:manos|cuchillo|"
        r"pistola) (?:en|a|contra) (?:mi|el) (?:cuello|garganta|cabeza)\b|\bamenazas? de muerte\b",
        r"\bme (?:esta |anda |andan |estan )?(?:siguiendo|persiguiendo|acosando|vigilando)\b|\b(?:le|les) (?:pega|pego|"
        r"pegan|golpea|golpeo|golpean|maltrata|maltrato|lastima|lastimo)\b",
        r"\bno me (?:deja|dejan|dejaba) (?:salir|irme|ir|comer|hablar|ver a|usar el telefono|llamar)\b|\bme "
        r"(?:quitaron|quito|quita|quitan) (?:mis|los|el) (?:papeles|documentos|pasaporte)\b|\bme (?:obliga|obligan|"
        r"obligo|forzo|forzaron) a\b",
    ),
    "medical_emergency": _rx(
        r"\b(?:not|isn'?t|is not|stopped|aren'?t|no longer|can'?t|cannot|cant|can not|trouble|struggling to|hard to|"
        r"trouble|struggling to|hard to) breath(?:e|ing)?\b|\bstopped breathing\b|\bgasping for (?:air|breath)\b",
        r"\bchest (?:pains?|hurts|is hurting|feels tight|tightness|pressure)\b|\bpain in (?:my|his|her) chest\b",
        rf"\b(?:having|is having|'s having|{IM} having|think (?:i'?m|he'?s|she'?s|im) having|might be having) "
        r"(?:a |an )?(?:bad |severe |major |really bad )?(?:heart attack|stroke|seizure|seizures|allergic reaction|anaphyla\w*|asthma attack|"
        r"diabetic (?:emergency|shock)|miscarriage)\b",
        r"\b(?:seizing|convulsing|unconscious|unresponsive|collapsed|went limp|turning blue|lips are blue|"
        r"won'?t wake up|will not wake up|can'?t wake (?:him|her|them|up)|passed out and|fainted|"
        r"(?:isn'?t|is not|not|won'?t|stopped) (?:responding|moving|respond|waking up)|can'?t get (?:any )?air|"
        r"(?:speech|words) (?:is |are )?slurred|blood everywhere)\b",
        r"\b(?:bleeding|bleed) (?:a lot|badly|heavily|everywhere|out|so much|really bad|and (?:it )?won'?t stop)\b|"
        r"\bwon'?t stop bleeding\b|\bcan'?t stop (?:the )?bleeding\b|\blosing (?:a lot of )?blood\b",
        rf"\b(?:is|'s|he'?s|she'?s|{IM}|am) choking\b",
        r"\b(?:call|need|send|get|calling) (?:me )?(?:an |a )?ambulance\b|\b(?:call|calling|called|dial|dialing|"
        r"should i call) 911\b",
        r"\bface (?:is )?drooping\b|\bslurr(?:ing|ed) (?:his |her |my )?(?:words|speech)\b|\bhit by a car\b|"
        r"\b(?:severe|bad) (?:allergic reaction|head injury|burns?)\b|\bthroat is (?:closing|swelling)\b",
        r"\bheart (?:stopped|isn'?t beating)\b|\bno pulse\b|\bdoing cpr\b",
        r"\b(?:face|mouth|smile) (?:is |looks |seems )?(?:drooping|droopy|crooked|lopsided)\b|\b(?:drooping|droopy|"
        r"numb|weak|limp) on one side\b|\bsudden(?:ly)? (?:\w+ )?(?:numb\w*|weak\w*|can'?t (?:talk|speak|see|walk|"
        r"move|stand)|confus\w*|slurr\w*|worst headache)\b|\bcan'?t (?:move|feel) (?:his|her|my|their) (?:left|"
        r"right|legs|arms?|face|side)\b|\bcan'?t (?:talk|speak) right\b",
        r"\b(?:clutching|clutched|grabbing|holding) (?:his|her|my) chest\b|\bfoaming at the mouth\b|"
        r"\bslumped over\b|\bon the floor and (?:can'?t|won'?t|isn'?t|is not|not)\b|\b(?:going to|gonna|about to) "
        r"pass out\b|\bhit (?:his|her|my|their) head and\b|\bfell (?:off|from) (?:a|the) (?:roof|ladder|balcony|"
        r"building|bridge|scaffold)\b",
        r"\b(?:lips?|tongue|face|throat)(?: and (?:lips?|tongue|face|throat))? (?:is |are )?(?:swelling|swollen|"
        r"puffing)(?: up)?\b|\bepi-?pen (?:didn'?t|did not|isn'?t|is not|wasn'?t) work\w*\b|\b(?:lips?|face|skin) "
        r"(?:is |are |turning |looks? )(?:blue|gray|grey|purple)\b|\bturning (?:blue|gray|grey|purple)\b",
        r"\b(?:blood )?(?:sugar|glucose) (?:is |level is )?(?:really |very |super |dangerously )?(?:low|high) and\b|"
        r"\b(?:can'?t|cannot|cant|unable to|struggling to) catch (?:his|her|their) breath\b",
        # Spanish
        r"\bno (?:puede |puedo |podia |esta |estaba )?respira\w*\b|\bdejo de respirar\b|\ble cuesta respirar\b",
        r"\bse le (?:cayo|cae|esta cayendo) la cara\b|\b(?:cara|boca) (?:caida|chueca|torcida)\b|\bde repente no "
        r"puede\b|\bno (?:responde|reacciona|se mueve)\b|\bno (?:se )?puede (?:levantar|mover\w*|hablar) (?:ni|y no)\b|\bse (?:le |me )?(?:esta )?hinch\w* (?:la|el|los) "
        r"(?:garganta|cara|lengua|labios)\b",
        r"\bdolor (?:fuerte |muy fuerte )?(?:en el|de|del) pecho\b|\bataque (?:al corazon|cardiaco|de corazon|de asma)\b",
        r"\b(?:tiene|teniendo|le (?:dio|esta dando)|sufre|sufriendo|es|creo que tiene) (?:un |una )?(?:derrame|infarto|"
        r"embolia)\b|\bconvulsion\w*|\bconvulsionando\b|\binconsciente\b",
        r"\bno (?:se )?(?:despierta|reacciona)\b|\bse desmayo\b|\bse desplomo\b",
        r"\bsangra(?:ndo)? mucho\b|\bno (?:para|deja) de sangrar\b|\bperdiendo mucha sangre\b",
        r"\b(?:se esta|me estoy|se) ahog(?:a|ando)\b|\b(?:una|la) ambulancia\b|\bllam\w* al 911\b",
        r"\breaccion alergica (?:fuerte|grave|severa)\b|\bse le cierra la garganta\b",
    ),
    "child_in_danger": _rx(
        rf"\b{CHILD}(?: \w+){{0,2}}? (?:is |isn'?t |has |just |won'?t |can'?t |'s |got |was |keeps |are )?(?:not breathing|"
        r"isn'?t breathing|stopped breathing|won'?t wake|unresponsive|choking|turning blue|having a seizure|seizing|"
        rf"swallowed|drank|(?:ate|got into|chewed|bit into)(?: \w+){{0,3}}? (?:{TOXIC}|{PILLS})|"
        r"fell (?:down|off|out|from)|"
        r"hit (?:his|her) head|unconscious|burned|drowning|bleeding|ran away|was taken|"
        r"got taken|being (?:abused|hurt|beaten|molested|touched)|is limp|went limp|won'?t stop crying and|wandered off|"
        r"is lost|ran off(?:\s*$| and| at| in| from| with (?:a|some))|disappeared|never came home|didn'?t come home|hasn'?t come home|(?:is |are )?home alone "
        r"(?:for|all|since|with no)|(?:is |was )?locked (?:out|outside)|not (?:crying or )?moving|isn'?t moving|"
        r"rolled off|"
        r"(?:has been |was |is )?left alone|left home alone)\b",
        rf"\b{CHILD}(?: \w+)? (?:is|has been|went|gone) missing(?:\s*$|[.!]|\s+(?:since|for|from|and|again|now|tonight|"
        r"today|\d))|\btook (?:my|our) (?:son|daughter|kids?|baby|children) and (?:won'?t|will not|refuses to)\b",
        rf"\b(?:hits|hitting|beats|beating|beat|hurts|hurting|hurt|abus\w*|molest\w*|touch(?:es|ed|ing)|burns|burned|"
        rf"chok\w*|shak(?:es|ing|en|ed)|shook|starv\w*|neglect\w*|locks|locked|kick(?:s|ed)|slams?|threw|throws|whips|"
        rf"whipped) {CHILD}\b",
        r"\bchild (?:abuse|neglect|is being abused)\b|\b(?:kids?|children|child|baby) (?:are|is) being (?:abused|"
        r"hurt|beaten|neglected|molested)\b|\bshaken baby\b|\bleft (?:the |my |a |his |her |their )?(?:baby|kids?|"
        r"child|children|toddler) (?:alone|home alone|in (?:the|a) (?:hot )?car)\b|\b(?:baby|child|kid|toddler) "
        r"(?:left )?(?:alone )?in (?:a|the) hot car\b|\bkidnapp\w*\b|\babduct\w*\b",
        rf"\b(?:can'?t|cannot|cant|couldn'?t) find {CHILD}\b|\b(?:tried to|trying to|try to|wants to) (?:take|grab|"
        rf"snatch|lure|kidnap) {CHILD}\b|\b(?:baby|child|kid|toddler|infant|kids|children) (?:left )?alone in (?:a|the|"
        r"their|his|her) (?:car|truck|van)\b",
        # Spanish
        rf"\b{NINO}(?: \w+){{0,3}}? (?:no respira|no esta respirando|no se mueve|no responde|esta sol[oa]|estan sol[oa]s|"
        r"no despierta|no reacciona|se (?:trago|tomo|comio|bebio|ahoga|esta ahogando|"
        r"cayo|golpeo la cabeza)|esta inconsciente|tiene una convulsion|esta convulsionando|desaparecio|se perdio|"
        r"esta sangrando|dejo de respirar|esta perdid[oa]|estan perdid[oa]s|no aparece|no (?:lo|la|los) "
        r"(?:encuentro|encontramos)|se puso (?:azul|morad[oa])|esta desaparecid[oa])\b",
        rf"\b(?:le pega|les pega|pega|golpea|golpeo|maltrata|maltrato|abusa de|abuso de|abusa a|abusando de|lastima|lastimo|"
        rf"quema|quemo|sacude|sacudio|toco|toca|tocando|tocaba|manosea) (?:a )?{NINO}\b",
        r"\b(?:maltrato|abuso|abuso sexual) (?:infantil|de (?:mi|mis|un|los) (?:hij|nin|beb)\w*)\b|\bsecuestr\w*\b",
    ),
}
CHILD_DANGER = re.compile(  # with a child named anywhere in the message
    r"\b(?:locked (?:out|outside|in (?:a|the|his|her|their) (?:room|closet|basement|car))|home alone (?:for|all|since|"
    r"with no)|alone (?:for days|all night|all day)|(?:can'?t|cannot|cant|couldn'?t) find (?:him|her|them)|"
    r"(?:grown|older|adult) (?:man|woman|guy|men)\b.{0,40}\b(?:meet|pictures|photos|nudes|sex)|nudes|naked "
    r"(?:pictures|photos)|never came (?:home|back)|no one (?:is )?watching (?:him|her|them)|got out (?:the|of the) (?:door|house|"
    r"yard|gate)|(?:is|are) gone(?:\s*$| and| now|[.!]))"
)
CHILD_HARM = re.compile(
    r"\b(?:touch(?:ed|es|ing)|molest\w*|abus(?:es|ed|ing)|hurt(?:s|ing)?|hit(?:s|ting)?|beat(?:s|ing)?) (?:him|her|them)\b"
)
SPANISH = frozenset(
    [
        "que",
        "quiero",
        "estoy",
        "esta",
        "ayuda",
        "donde",
        "por",
        "para",
        "con",
        "una",
        "el",
        "la",
        "los",
        "las",
        "de",
        "y",
        "es",
        "muy",
        "tengo",
        "puedo",
        "mi",
        "hijo",
        "hija",
        "bebe",
        "esposo",
        "esposa",
        "pastillas",
        "morir",
        "vida",
        "ya",
        "mas",
        "favor",
        "necesito",
        "hay",
        "se",
        "lo",
        "le",
        "su",
        "del",
        "al",
        "pero",
        "como",
        "cuando",
        "todo",
        "nada",
        "nadie",
        "quiere",
        "va",
        "voy",
        "ella",
        "el",
        "tomo",
        "dijo",
        "matar",
        "miedo",
        "peligro",
        "no",
        "respira",
        "aqui",
        "ahora",
        "casa",
        "mis",
        "sobre",
        "en",
        "un",
        "unos",
        "tu",
        "violencia",
        "mujer",
        "hombre",
        "ninos",
        "nino",
        "taller",
        "cuenta",
        "factura",
        "luz",
        "renta",
        "comida",
        "hambre",
    ]
)
ENGLISH = frozenset(
    [
        "the",
        "i",
        "i'm",
        "im",
        "my",
        "to",
        "and",
        "is",
        "a",
        "of",
        "in",
        "it",
        "you",
        "want",
        "need",
        "help",
        "where",
        "can",
        "me",
        "am",
        "he",
        "she",
        "his",
        "her",
        "this",
        "that",
        "with",
        "for",
        "on",
        "at",
        "be",
        "have",
        "has",
        "took",
        "taking",
        "just",
        "don't",
        "dont",
        "can't",
        "cant",
        "not",
        "what",
        "how",
        "get",
    ]
)


def language(message: str, text: str | None = None) -> str:
    """``es`` when more of the words are Spanish than English (ties: ``en``)."""
    words = (text if text is not None else normalise(message)).replace("?", " ").replace(",", " ").split()
    es = sum(w in SPANISH for w in words) - sum(w in {"no", "me", "a", "de"} for w in words) * 0.5
    en = sum(w in ENGLISH for w in words)
    if re.search(r"[áéíóúñ¿¡]|\w(?:cion|mente|ando|iendo)\b", message.lower()):
        es += 1.5
    return "es" if es > en else "en"


# --- the detector ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Crisis:
    """What ``detect`` found: the most urgent kind, every kind, the language and how it was found."""

    kind: str
    kinds: tuple[str, ...]
    language: str
    matched_by: str  # lexicon | similarity | classifier
    score: float  # lexicon: the best crisis exemplar's cosine when a vector was given, else 1.0; similarity: it


def masked(text: str) -> tuple[str, bool]:
    """``text`` with its idioms and negated crisis words blanked out, and whether there were any."""
    out = IDIOMS.sub(" _ ", text)
    out = NEGATIONS.sub(" _ ", out)
    return out, out != text


def model_text(message: str) -> str:
    """The text the classifier's n-grams are read from: the lexicon's (normalised, spelled out, safe phrases
    masked)."""
    return masked(spelled(normalise(message)))[0]


def lexicon_kinds(message: str) -> tuple[tuple[str, ...], bool, str]:
    """The kinds whose crisis expressions the message holds (most urgent first), whether a safe phrase was masked,
    and the normalised text."""
    text = normalise(message)
    safe, had_safe = masked(spelled(text))
    found = [kind for kind in URGENCY if LEXICON[kind].search(safe)]
    urgent = {"overdose_poisoning", "medical_emergency"} & set(found)
    if urgent and "child_in_danger" not in found and re.search(rf"\b{CHILD}\b|\b{NINO}\b", safe):
        found.insert(0, "child_in_danger")  # "my son took a whole bottle of pills", "the baby is not breathing"
    if "child_in_danger" not in found and re.search(rf"\b{CHILD}\b", safe) and CHILD_DANGER.search(safe):
        found.insert(0, "child_in_danger")  # "the little boy down the street is always locked outside"
    if "child_in_danger" not in found and re.search(rf"\b{CHILD}\b", safe) and CHILD_HARM.search(safe):
        found.insert(0, "child_in_danger")  # "my son's teacher touched him"
    return tuple(found), had_safe, text


class ExemplarMatrix:
    """The exemplars embedded by one embedder: crisis rows (with their kinds) and non-crisis rows."""

    def __init__(self, crisis: np.ndarray, kinds: list[str], safe: np.ndarray) -> None:
        self.crisis = crisis
        self.kinds = kinds
        self.safe = safe

    def score(self, vector: np.ndarray) -> tuple[str, float, float]:
        """The kind of the closest crisis exemplar, its cosine and the closest non-crisis exemplar's."""
        sims = self.crisis @ vector
        best = int(np.argmax(sims))
        return self.kinds[best], float(sims[best]), float(np.max(self.safe @ vector))


def load_exemplars(path: Path = EXEMPLARS) -> tuple[list[tuple[str, str]], list[str]]:
    """(kind, text) of every crisis exemplar, and the non-crisis exemplars (``crisis_exemplars.yaml``)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    crisis = [(kind, text) for kind in KINDS for lang in LANGUAGES for text in data["crisis"][kind].get(lang) or []]
    safe = [text for lang in LANGUAGES for text in data["not_crisis"].get(lang) or []]
    return crisis, safe


_MATRICES: dict[tuple[int, str], ExemplarMatrix | None] = {}
_LOCK = threading.Lock()


SHIPPED = EXEMPLARS.with_suffix(".npz")  # the exemplars' vectors by the default model and precision


def exemplars_digest(path: Path = EXEMPLARS) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_vectors(model_id: str, digest: str, path: Path = SHIPPED) -> np.ndarray | None:
    """The shipped vectors when they are ``model_id``'s of exactly this exemplar file (``digest``), else None."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["model_id"]) == model_id and str(data["sha256"]) == digest:
                return np.asarray(data["vectors"], dtype=np.float32)
    except (OSError, KeyError, ValueError):
        return None
    return None


def ship_vectors(embedder: Any, path: Path = SHIPPED) -> Path:
    """Embed the exemplars with ``embedder`` and write them beside the YAML (``python -m bench.crisis --ship``)."""
    crisis, safe = load_exemplars()
    vectors = np.asarray(embedder.encode([t for _, t in crisis] + safe), dtype=np.float16)
    np.savez_compressed(
        path, vectors=vectors, model_id=np.array(embedder.model_id), sha256=np.array(exemplars_digest())
    )
    return path


def exemplar_matrix(embedder: Any) -> ExemplarMatrix | None:
    """The exemplars embedded by ``embedder`` (once per process and embedder; None: it cannot embed them). The
    shipped vectors (``crisis_exemplars.npz``) are used when they are this embedder's model and precision and of
    this exemplar file; otherwise the exemplars are embedded now, once."""
    key = (id(embedder), str(getattr(embedder, "model_id", "")))
    if key in _MATRICES:
        return _MATRICES[key]
    with _LOCK:
        if key not in _MATRICES:
            try:
                crisis, safe = load_exemplars()
                vectors = shipped_vectors(key[1], exemplars_digest())
                if vectors is None or len(vectors) != len(crisis) + len(safe):
                    vectors = np.asarray(embedder.encode([t for _, t in crisis] + safe), dtype=np.float32)
                _MATRICES[key] = ExemplarMatrix(vectors[: len(crisis)], [k for k, _ in crisis], vectors[len(crisis) :])
            except (AttributeError, TypeError, ValueError):
                _MATRICES[key] = None
    return _MATRICES[key]


def rules(message: str, vector: np.ndarray | None = None, embedder: Any = None) -> Crisis | None:
    """The lexicon's and the exemplars' verdict (``detect`` before the classifier has its say)."""
    kinds, had_safe, text = lexicon_kinds(message)
    matrix = exemplar_matrix(embedder) if embedder is not None and vector is not None else None
    scored = None
    if matrix is not None and vector is not None and matrix.crisis.shape[1] == np.shape(vector)[-1]:
        scored = matrix.score(np.asarray(vector, dtype=np.float32))
    lang = language(message, text)
    if kinds:
        return Crisis(kinds[0], kinds, lang, "lexicon", round(scored[1], 4) if scored else 1.0)
    if scored is None:
        return None
    kind, near, safe = scored
    asking = had_safe or bool(ASKING.search(text))
    wanted = max(MIN_MARGIN_ASKING if asking else MIN_MARGIN, MIN_MARGIN_SPANISH if lang == "es" else 0.0)
    if near >= MIN_SIMILARITY and near - safe >= wanted:
        return Crisis(kind, (kind,), lang, "similarity", round(near, 4))
    return None


def detect(message: str, vector: np.ndarray | None = None, embedder: Any = None) -> Crisis | None:
    """The crisis a message shows, or None. ``vector``: its embedding (by ``embedder``, whose exemplar vectors it is
    compared with); without both, the lexicon alone decides.

    With a vector of the shipped classifier's model (``crisis_model``), the classifier has the last word: a crisis
    the rules missed is found when its probability reaches the classifier's threshold (``matched_by:
    classifier``; the threshold is per language), and a find of the rules (lexicon or exemplars) in a message of
    ``VETO_MIN_WORDS`` words or more is dropped when the veto model is sure enough it is none ("my mom will kill me
    if im late"; the veto is per language, chosen so that it dropped no crisis message of the training data)."""
    found = rules(message, vector, embedder)
    model = crisis_model.shipped() if vector is not None else None
    if model is None or not model.applies(vector, getattr(embedder, "model_id", None)):
        return found
    text = model_text(message)
    if found is not None:
        return None if model.vetoes_find(message, text, vector, found.language) else found  # type: ignore[arg-type]
    p = model.probability(text, vector, False)  # type: ignore[arg-type]
    lang = language(message, normalise(message))
    if p < model.threshold(lang):
        return None
    kinds = model.kinds(text, vector)  # type: ignore[arg-type]
    return Crisis(kinds[0], kinds, lang, "classifier", p)


# --- the lines -------------------------------------------------------------------------------------------------------
LINES: dict[str, dict[str, str]] = {
    "988": {
        "name": "988 Suicide & Crisis Lifeline",
        "number": "988",
        "en": "Call or text 988 (988 Suicide & Crisis Lifeline), or chat at 988lifeline.org: free, confidential, 24/7.",
        "es": "Llame o envíe un mensaje de texto al 988 (Línea 988 de Prevención del Suicidio y Crisis; oprima 2 "
        "para español): gratis, confidencial, las 24 horas.",
    },
    "911-danger": {
        "name": "911",
        "number": "911",
        "en": "Call 911 if you are in immediate danger.",
        "es": "Llame al 911 si está en peligro inmediato.",
    },
    "911-breathing": {
        "name": "911",
        "number": "911",
        "en": "Call 911 now if someone is not breathing, will not wake up or is having a seizure.",
        "es": "Llame al 911 ahora si alguien no respira, no despierta o tiene una convulsión.",
    },
    "911-now": {
        "name": "911",
        "number": "911",
        "en": "Call 911 now.",
        "es": "Llame al 911 ahora.",
    },
    "911-child": {
        "name": "911",
        "number": "911",
        "en": "Call 911 now if a child is hurt, not breathing or in immediate danger.",
        "es": "Llame al 911 ahora si un niño está herido, no respira o está en peligro inmediato.",
    },
    "poison": {
        "name": "Poison Control",
        "number": "1-800-222-1222",
        "en": "Poison Control: call 1-800-222-1222 (free, 24/7) for a poisoning or an overdose.",
        "es": "Control de Envenenamientos: llame al 1-800-222-1222 (gratis, las 24 horas, hay intérpretes) por un "
        "envenenamiento o una sobredosis.",
    },
    "dv": {
        "name": "National Domestic Violence Hotline",
        "number": "1-800-799-7233",
        "en": "National Domestic Violence Hotline: call 1-800-799-7233 or text START to 88788 (24/7, confidential).",
        "es": "Línea Nacional contra la Violencia Doméstica: llame al 1-800-799-7233 (hablan español) o envíe "
        "START al 88788 (las 24 horas, confidencial).",
    },
    "childhelp": {
        "name": "Childhelp National Child Abuse Hotline",
        "number": "1-800-422-4453",
        "en": "Childhelp National Child Abuse Hotline: call or text 1-800-422-4453 (24/7).",
        "es": "Línea Nacional de Childhelp contra el Abuso Infantil: llame o envíe un texto al 1-800-422-4453 "
        "(las 24 horas, hay intérpretes).",
    },
}
KIND_LINES: dict[str, tuple[str, ...]] = {
    "suicide_self_harm": ("988", "state", "911-danger"),
    "overdose_poisoning": ("911-breathing", "poison", "state"),
    "violence_abuse": ("911-danger", "dv"),
    "medical_emergency": ("911-now",),
    "child_in_danger": ("911-child", "childhelp"),
}
# The home state's own lines, by postal code: each with the kinds it serves. A deployment adds its state's here
# (or names local lines in its home's ``crisis_lines``, given to ``lines_for`` as ``local``).
STATE_LINES: dict[str, tuple[dict[str, Any], ...]] = {
    "WV": (
        {
            "name": "HELP4WV",
            "number": "1-844-435-7498",
            "kinds": ("suicide_self_harm", "overdose_poisoning"),
            "en": "HELP4WV (West Virginia's 24/7 line for mental health and addiction): call or text 1-844-435-7498.",
            "es": "HELP4WV (la línea de West Virginia para salud mental y adicciones, las 24 horas): llame o envíe "
            "un texto al 1-844-435-7498.",
        },
    ),
}
HEADINGS = {
    "suicide_self_harm": {
        "en": "You don't have to go through this alone. Please reach out now:",
        "es": "No tiene que pasar por esto solo. Por favor, pida ayuda ahora:",
    },
    "overdose_poisoning": {
        "en": "This may be an emergency. Please get help now:",
        "es": "Esto puede ser una emergencia. Por favor, pida ayuda ahora:",
    },
    "violence_abuse": {
        "en": "Your safety comes first. Please get help now:",
        "es": "Su seguridad es lo primero. Por favor, pida ayuda ahora:",
    },
    "medical_emergency": {
        "en": "This sounds like a medical emergency. Please get help now:",
        "es": "Esto parece una emergencia médica. Por favor, pida ayuda ahora:",
    },
    "child_in_danger": {
        "en": "A child may be in danger. Please get help now:",
        "es": "Un niño puede estar en peligro. Por favor, pida ayuda ahora:",
    },
}
NO_PLACE = {
    "en": "If you tell me your county or ZIP code, I can also look for programs near you.",
    "es": "Si me dice su condado o código postal, también puedo buscar programas cerca de usted.",
}


def lines_for(
    kinds: tuple[str, ...] | list[str],
    lang: str,
    home_states: tuple[str, ...] | list[str] = (),
    local: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
) -> list[dict[str, str]]:
    """The lines for ``kinds`` (most urgent first), each number once: ``name``, ``number``, ``text`` (in ``lang``).
    ``home_states``: whose ``STATE_LINES`` are given; ``local``: the deployment's own (name, phone) lines."""
    lang = lang if lang in LANGUAGES else "en"
    out: list[dict[str, str]] = []
    seen: set[str] = set()

    def add(line: dict[str, Any]) -> None:
        if line["number"] not in seen:
            seen.add(line["number"])
            out.append({"name": line["name"], "number": line["number"], "text": line[lang]})

    for kind in kinds:
        for key in KIND_LINES.get(kind, ()):
            if key != "state":
                add(LINES[key])
                continue
            for state in home_states:
                for line in STATE_LINES.get(str(state).upper(), ()):
                    if kind in line["kinds"]:
                        add(line)
    for name, phone in local:
        add({"name": name, "number": phone, "en": f"{name}: {phone}.", "es": f"{name}: {phone}."})
    return out


# The program types a crisis steers the registry lookup to when the message names none (crisis lines first, then
# these local programs: "I feel like killing myself, where can I get help in Beckley" → 988, then the clinic).
STEERING: dict[str, tuple[str, ...]] = {
    "suicide_self_harm": ("behavioral_health", "healthcare"),
    "overdose_poisoning": ("behavioral_health", "healthcare"),
    "violence_abuse": ("housing", "legal_aid", "behavioral_health"),
    "medical_emergency": ("healthcare",),
    "child_in_danger": ("healthcare", "behavioral_health"),
}


def steering(crisis: Crisis) -> dict[str, Any]:
    """A population hint (``route.population``) steering the registry lookup to the crisis' program types; it
    names the kind, never the message's words."""
    types = list(dict.fromkeys(t for kind in crisis.kinds for t in STEERING.get(kind, ())))
    return {"population": "crisis", "matched": crisis.kind, "resource_types": types}


def route_crisis(crisis: Crisis, lines: list[dict[str, str]], evidence_class: str) -> dict[str, Any]:
    """``route.crisis``: kind, kinds, language, lines, matched_by, score, and the class the evidence alone gave."""
    return {
        "kind": crisis.kind, "kinds": list(crisis.kinds), "language": crisis.language, "lines": lines,
        "matched_by": crisis.matched_by, "score": crisis.score, "evidence_class": evidence_class,
    }  # fmt: skip


def crisis_text(route: dict[str, Any]) -> str:
    """The first lines of the answer to a crisis message: a heading and one line per number."""
    lang: Any = route.get("language") if route.get("language") in LANGUAGES else "en"
    head = HEADINGS.get(route.get("kind") or "", HEADINGS["suicide_self_harm"])[lang]
    return head + "\n" + "\n".join(f"- {line['text']}" for line in route.get("lines") or [])


def with_lines(answer: str, route: dict[str, Any] | None) -> str:
    """``answer`` with the crisis lines first (unchanged when it already starts with them, or no crisis)."""
    if not route:
        return answer
    block = crisis_text(route)
    if answer.startswith(block):
        return answer
    return block + ("\n\n" + answer.strip() if answer.strip() else "")
