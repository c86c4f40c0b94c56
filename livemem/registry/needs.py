"""The one vocabulary of needs: for each registry resource type, the taxonomy terms a 211 files it under and the
plain words a resident asks for it with (docs/context.md, "Needs").

Both readers take it from here:

- ``livemem.registry.taxonomy`` types a source's taxonomy terms: by AIRS/211 code prefix (``airs``), by Open
  Eligibility top-level category (``open_eligibility``) and by keywords on the term's name (``term_names``: the
  taxonomy's own words, "Food Stamps/SNAP", "Homeless Shelter", "General Legal Aid"), applied in ``NAME_ORDER``;
- ``livemem.answer.routing`` reads the needs of a message from the plain words (``english`` then ``spanish``):
  regular-expression alternatives matched whole-word and without case, in the order of ``NEEDS`` on a tie.

``term_names`` are matched inside the lower-cased name of a term (no word boundaries unless written), the plain
words as whole words of a message; they are kept apart because a term's name and a resident's sentence use words
differently ("senior" names a senior program; "a senior" asking for food asks for food). ``terms`` are names of
taxonomy terms of each type, both readers give that type for each (``tests/unit/test_needs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Need:
    type: str  # the registry resource_type (schemas/local_resource.schema.json)
    airs: tuple[str, ...] = ()  # AIRS/211 code prefixes (taxonomy.CODE_PREFIXES)
    open_eligibility: tuple[str, ...] = ()  # Open Eligibility top-level categories, lower case
    term_names: tuple[str, ...] = ()  # patterns on a taxonomy term's lower-cased name (taxonomy.NAME_RULES)
    english: tuple[str, ...] = ()  # plain words, regular-expression alternatives
    spanish: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()  # names of taxonomy terms of this type (AIRS / Open Eligibility), as examples

    @property
    def words(self) -> str:
        """The plain words as one alternation (English first)."""
        return "|".join((*self.english, *self.spanish))


# In the order routing lists a message's needs named by the same words (the first wins a tie). AIRS top-level
# sections: B basic needs, D consumer services, F criminal justice and legal, H education, L health care, N income
# support and employment, P individual and family life, R mental health and substance use, T organisational /
# community, Y target populations (Y says who, not what: names decide). Only codes of the taxonomy's published
# structure are listed (its top-level sections and a few well-known second levels); where a code's place was not
# certain, the term's name decides instead. Open Eligibility's Emergency, Money and Care say too little: names decide.
# fmt: off
NEEDS: tuple[Need, ...] = (
    Need(
        "utility_assistance",
        airs=("BV",),  # Utilities (BV-8900 utility service payment assistance)
        term_names=(
            r"utilit|electric|\bgas (?:service|bill)|water (?:service|bill)|heating|\bliheap\b|\blieap\b"
            r"|energy assist",
        ),
        english=(
            r"utilit\w*", "heat", "heating", "heater", "heat bills?",
            r"(?:electric|electricity|power|gas|water|energy|utility|heating|light) bills?", r"electric\w*", "lieap",
            "liheap", "energy assistance", "shut-?offs?", "shut off", r"disconnect\w*", "propane", "fuel oil",
            "furnace", "keep (?:the )?(?:heat|lights) on", "lights? (?:got |were |was )?(?:cut|turned) off",
        ),
        spanish=(
            "factura de (?:la )?(?:luz|electricidad|gas|agua)", "calefacci[oó]n", "electricidad",
            "corte de (?:luz|servicio)", "pagar (?:la )?luz", "cortar (?:la )?(?:luz|electricidad|calefacci[oó]n|gas)",
            "sin (?:luz|calefacci[oó]n)",
        ),
        terms=("Electric Service Payment Assistance", "Utility Service Payment Assistance", "Heating Fuel"),
    ),
    Need(
        "snap",
        term_names=(r"food stamps?|\bsnap\b|supplemental nutrition assistance|\bebt\b",),
        english=(
            "snap", "food stamps?", "ebt", "food benefits?", "food assistance",
            r"(?:need|needs|afford|buy|buying) (?:\w+ )?food", "help (?:with|buying|paying for) food",
        ),
        spanish=(
            "cupones de (?:alimentos|comida)", "estampillas de comida",
            "(?:asistencia|ayuda|beneficios) (?:de|con|para) (?:alimentos|comida)",
        ),
        terms=("Food Stamps/SNAP", "SNAP Applications", "EBT Cards"),
    ),
    Need(
        "wic",
        term_names=(r"\bwic\b|women,? infants,? (?:and|&) children",),
        english=(
            "wic", "(?:baby|infant) formula", "formula for (?:my|the) baby", "nutrition", "healthy food",
            "women,? infants,? (?:and|&) children",  # the taxonomy's name of it, added with this vocabulary
        ),
        spanish=("f[oó]rmula (?:para|de) (?:mi |el )?beb[eé]", "leche para (?:mi |el )?beb[eé]"),
        terms=("WIC", "Women, Infants and Children"),
    ),
    Need(
        "medicaid",
        term_names=(r"medicaid|\bchip\b|children'?s health insurance|health insurance",),
        english=(
            "medicaid", "wvchip", "chip", "health coverage", "health insurance", "medical card", "insurance card",
        ),
        spanish=("seguro (?:m[eé]dico|de salud)",),
        terms=("Medicaid", "Children's Health Insurance Program (CHIP)", "Health Insurance"),
    ),
    Need(
        "food_pantry",
        airs=("BD",),  # Food (BD-1800 emergency food, BD-5000 meals)
        open_eligibility=("food",),
        term_names=(
            r"\bfood\b(?! stamps?)|pantr|\bmeals?\b|soup kitchen|groceri|nutrition (?:site|program)|brown bag",
        ),
        english=(
            "pantry", "pantries", "food banks?", "groceries", "grocery", "meals?", "soup kitchens?", "hungry",
            "free food", "food boxes?", "something to eat", "nothing to eat", "food tonight",
            "(?:need|needs|needing|get|find|out of|no) (?:some )?food", "starving",
            "feed (?:my|our) (?:kids|children|family)",
        ),
        spanish=(
            "despensas?", "bancos? de (?:alimentos|comida)", "comida", "comedor(?:es)?(?: social(?:es)?)?",
            "tengo hambre", "hambre",
        ),
        terms=("Food Pantries", "Soup Kitchens", "Home Delivered Meals", "Food Banks"),
    ),
    Need(
        "seasonal_assistance",
        airs=("BM",),  # Material Goods (clothing, household goods, holiday gifts, school supplies)
        open_eligibility=("goods",),
        term_names=(
            r"clothing|coats?\b|holiday|christmas|school supplies|cooling center|thanksgiving|furniture",
        ),
        english=(
            "winter coats?", "coats?", "jackets?", "gloves", "blankets?", "holiday", "christmas", "toys",
            "school supplies", r"cooling cent\w*", "coat drives?",
        ),
        spanish=("abrigos?", "chaquetas?", "guantes", "juguetes", "navidad", "ropa de invierno"),
        terms=("Holiday Gifts/Toys", "Christmas Baskets", "School Supplies", "Winter Coats"),
    ),
    Need(
        "housing",
        airs=("BH",),  # Housing/Shelter (BH-1800 emergency shelter, BH-3800 housing expense assistance)
        open_eligibility=("housing",),
        term_names=(r"shelter|homeless|\brent\b|rental|housing|eviction|weatheriz|transitional living",),
        english=(
            "housing", "rent", "rental", "shelters?", r"evict\w*", r"homeless\w*", r"weatheri\w*",
            "place to (?:stay|sleep|live)", "(?:somewhere|where|nowhere) to (?:stay|sleep|live|go)", "sleep tonight",
            "shelter tonight", "section 8", "vouchers?", "kicked (?:(?:me|us|them) )?out",
        ),
        spanish=(
            "refugios?", "albergues?", "vivienda", "renta", "alquiler", "desalojo", "desalojad[oa]s?", "sin hogar",
            "d[oó]nde dormir",
        ),
        terms=("Homeless Shelter", "Rent Payment Assistance", "Eviction Prevention", "Weatherization Programs"),
    ),
    Need(
        "healthcare",
        airs=("L",),  # Health Care
        open_eligibility=("health",),
        term_names=(
            r"clinic|health care|healthcare|medical|dental|pharmac|prescription|primary care|hospital|immuniz",
        ),
        english=(
            "clinics?", "doctors?", "dental", "dentists?", "teeth", r"pharmac\w*", "prescriptions?", "primary care",
            "medical care", "health care", "healthcare", "check-?ups?", "tooth(?:ache)?", "vaccinations?",
            "vaccines?", "shots", "sick", "nurses?",
        ),
        spanish=("cl[ií]nicas?", "m[eé]dicos?", "enferm[oa]s?", "dentistas?", "farmacias?"),
        terms=("Community Clinics", "Dental Care", "Prescription Expense Assistance", "Primary Care"),
    ),
    Need(
        "behavioral_health",
        airs=("R",),  # Mental Health and Substance Use Disorder Services
        term_names=(
            r"mental health|counsel|substance|addiction|alcohol|\bdrug|detox|crisis (?:intervention|line)|suicide"
            r"|behavioral|psychiatr",
        ),
        english=(
            "mental health", "counsel(?:ing|or|ors)", "therap(?:y|ist)", "addiction", "substance use",
            "behavioral health", r"depress\w*", "anxiety",
        ),
        spanish=("salud mental", "consejer[ií]a", "terapia"),
        terms=("Mental Health Counseling", "Substance Use Disorder Treatment", "Behavioral Health Services"),
    ),
    Need(
        "transportation",
        airs=("BT",),  # Transportation
        open_eligibility=("transit",),
        term_names=(r"transport|\brides?\b|\bbus\b|transit|paratransit|gas money",),
        english=("rides?", "transportation", "bus(?:es)?", "transit", "get to (?:my|the) (?:doctor|appointment)"),
        spanish=("transporte",),
        terms=("Transportation", "Medical Appointment Transportation", "Bus Services", "Transit Passes"),
    ),
    Need(
        "childcare",
        airs=("PH-1250",),  # child care
        term_names=(r"child ?care|day ?care|pre-?school|head start|after ?school",),
        english=("child ?care", "daycare", "day care", r"babysit\w*"),
        spanish=("guarder[ií]as?", "cuidado de (?:los )?niñ[oa]s"),
        terms=("Child Care Centers", "Day Care", "Child Care Expense Assistance"),
    ),
    Need(
        "employment",
        airs=("ND",),  # Employment
        open_eligibility=("work",),
        term_names=(r"employment|\bjobs?\b|job training|vocational|workforce|career",),
        english=("jobs?", "employment", "work search", r"unemploy\w*"),
        spanish=("trabajo", "empleo"),
        terms=("Employment", "Job Search/Placement", "Job Training"),
    ),
    Need(
        "legal_aid",
        airs=("FT",),  # Legal Services
        open_eligibility=("legal",),
        term_names=(r"legal|attorney|lawyer|court|tenant rights",),
        english=(
            "legal aid", "lawyers?", "attorneys?", "legal help", "legal advice", "benefits denial", "denied benefits",
            "appeal",
        ),
        spanish=("abogad[oa]s?", "ayuda legal"),
        terms=("General Legal Aid", "Legal Aid", "Lawyer Referral Services"),
    ),
    Need(
        "senior_services",
        term_names=(r"home delivered meals|meals on wheels|senior|older adult|\baging\b|elder|retire",),
        english=("senior services", "elderly"),
        # added with this vocabulary: the other needs had Spanish words, these two had none
        spanish=("servicios (?:para|de) (?:las )?(?:personas |adultos )?mayores", "servicios para ancianos"),
        terms=("Senior Services", "Elderly Services"),
    ),
    Need(
        "disability_services",
        term_names=(r"disabilit|disabled|wheelchair|\bdeaf\b|\bblind",),
        english=("disability services",),
        spanish=("servicios (?:para|de) (?:personas con )?discapacidad(?:es)?",),
        terms=("Disability Services",),
    ),
    Need(
        "education",
        airs=("H",),  # Education
        open_eligibility=("education",),
        term_names=(
            r"\bged\b|adult education|literacy|\besl\b|english as a second|tutor|high school equivalen",
        ),
        # added with this vocabulary: the taxonomy typed education, routing had no words for it
        english=(
            "ged", "adult education", "literacy", "esl", "english as a second language", "english (?:classes|lessons)",
            r"tutor(?:s|ing)?", r"high school equivalen\w*",
        ),
        spanish=("clases de ingl[eé]s", "educaci[oó]n (?:para|de) adultos", "alfabetizaci[oó]n"),
        terms=("Adult Education", "GED/High School Equivalency Test Instruction", "Literacy Programs", "ESL"),
    ),
)
# fmt: on
BY_TYPE: dict[str, Need] = {n.type: n for n in NEEDS}

# The order a term's name gives its types in (the first is the row's resource_type: "Senior Transportation" is a
# senior service first; "Holiday Meals" food first).
NAME_ORDER: tuple[str, ...] = (
    "snap", "wic", "medicaid", "utility_assistance", "food_pantry", "senior_services", "housing", "healthcare",
    "behavioral_health", "transportation", "childcare", "employment", "legal_aid", "disability_services",
    "education", "seasonal_assistance",
)  # fmt: skip

# Needs met by programs of one family: the program of the family a message names that is made for a population it
# names is looked up beside it ("pregnant and need help buying food": WIC beside SNAP; a pantry's backpack program
# for school kids is no WIC question). COMPANION_POPULATIONS are those populations (livemem.answer.routing).
NEED_FAMILIES: tuple[frozenset[str], ...] = (
    frozenset({"snap", "wic", "food_pantry"}),
    frozenset({"medicaid", "healthcare"}),
    frozenset({"housing", "utility_assistance"}),
)
COMPANION_POPULATIONS = frozenset({"pregnant"})
