import click


@click.group()
def cli() -> None:
    """profdb"""


def main() -> None:
    cli()
