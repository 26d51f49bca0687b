#!/usr/bin/perl

# $bytes_sent is what the connection wrote: the head as it went out (its
# status line, the fields sluice adds when it writes it: Date, Connection,
# the framing) and the body. For each response the client counts the bytes
# it got to the close; the log line must say the same. And the values
# nginx finds empty are logged empty, not as "-" ($is_args without
# arguments), as nginx logs them (checked beside nginx 1.22).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(11);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format sent '$request_uri $bytes_sent $body_bytes_sent';
    access_log %%TESTDIR%%/sent.log sent;
    log_format args '$uri [$is_args] [$args] [$request_completion]';
    access_log %%TESTDIR%%/args.log args;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%;
        location /p/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /r { return 200 "returned"; }
        location /e { return 404; }
        location /h { add_header X-Long "%%TESTDIR%%"; return 201 "x"; }
    }
}

EOF
$t->write_file('f.txt', 'a file');
$t->write_file('big.bin', 'x' x (16 << 20));
$t->raw_backend(port(8081),
	'/len' => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	'/chunked' => { send => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		. "3\r\nabc\r\n0\r\n\r\n" },
	'/close' => { send => "HTTP/1.0 200 OK\r\n\r\n" . ('z' x 70000), close => 1 });
$t->run();

my %got;
for my $uri ('/f.txt', '/r?a=1', '/e', '/h', '/p/len', '/p/chunked', '/p/close') {
	my $r = http("GET $uri HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", raw => 1)
		// '';
	$got{$uri} = length $r;
}
# A response cut short: the client reads a little of a big file and goes.
{
	my $s = http_start("GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n", start => 1);
	$s->sysread(my $buf, 1000);
	close $s;
	select(undef, undef, undef, 0.5);
}
$t->stop();
my %logged = map { my @f = split / /; ($f[0] => $f[1]) } split /\n/, $t->read_file('sent.log');
is($logged{$_}, $got{$_}, "$_: \$bytes_sent is what the client got ($got{$_})")
	for sort keys %got;
my $args = $t->read_file('args.log');
like($args, qr{^/f\.txt \[\] \[-\] \[OK\]$}m, '$is_args without arguments: empty; $args: -');
like($args, qr{^/r \[\?\] \[a=1\] \[OK\]$}m, 'with arguments: ? and them; complete: OK');
like($args, qr{^/big\.bin \[\] \[-\] \[\]$}m, '$request_completion of a response cut short: empty');
unlike($args, qr{^/big\.bin .*OK}m, 'and not OK');
