#!/usr/bin/perl

# proxy_ignore_client_abort on: a client that goes away while the upstream
# works leaves the upstream request to finish (its answer read, the access
# log line written with the upstream's status); off (the default) ends it.
# A client that only shuts its side of the connection once it has sent the
# request gets the answer with it on, as from nginx, and none with it off
# (nginx takes that end of file for the client going away).

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format u '$uri $status $upstream_status';
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        access_log %%TESTDIR%%/u.log u;

        location /ign/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
            proxy_ignore_client_abort on;
        }
        location /abort/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
    }
}

EOF

$t->backend(port(8081));
$t->run();

sub leave {
	my ($uri) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die;
	$s->syswrite("GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n");
	select(undef, undef, undef, 0.3);
	close $s;
}

leave('/abort/slow/1/a');
leave('/ign/slow/1/b');
ok($t->waitforlog(qr!^/ign/slow/1/b 200 200$!m, 5, 'u.log'), 'ignored: upstream answer taken and logged');
ok($t->waitforlog(qr/client prematurely closed connection/), 'client leaving logged');
unlike($t->read_file('u.log'), qr!/abort/slow/1/a 200!, 'not ignored: request ended');

# The request, then the client's side shut: what comes back.
sub half_close {
	my ($uri) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die;
	$s->syswrite("GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n");
	shutdown($s, 1);
	my ($got, $n) = ('');
	$got .= $n while sysread($s, $n, 4096);
	return $got;
}

like(half_close('/ign/slow/0.3/c'), qr!^HTTP/1.1 200 .*\r\nConnection: close\r\n(?:.*\r\n)?\r\n\d+ /slow/0.3/c$!s,
	'ignored: a client that shut its side gets the answer, and the connection closes');
is(half_close('/abort/slow/0.3/d'), '', 'not ignored: a client that shut its side gets none');
