import click

from .query import query_cmd, sql_cmd


@click.group()
def cli() -> None:
    """profdb"""


cli.add_command(query_cmd)
cli.add_command(sql_cmd)


def main() -> None:
    cli()
