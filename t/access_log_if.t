#!/usr/bin/perl

# access_log if=: the line is written only when the condition is neither
# empty nor "0" (a map on $status, a variable); bad parameters are refused
# with file and line (buffering itself: access_log_buffer.t).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http map/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format u '$uri $status';
    map $status $loggable {
        ~^[23] 0;
        default 1;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        access_log %%TESTDIR%%/errors.log u if=$loggable;
        access_log %%TESTDIR%%/arg.log u if=$arg_log;

        location / { return 200 "ok"; }
        location /missing { return 404; }
    }
}

EOF

$t->run();

http_get('/ok');
http_get('/missing');
http_get('/ok2?log=1');
http_get('/ok3?log=0');
http_get('/last?log=yes');

ok($t->waitforlog(qr!^/missing 404\n!m, 3, 'errors.log'), 'failed request logged');
ok($t->waitforlog(qr!^/last 200\n!m, 3, 'arg.log'), 'conditional line written');
my $errors = $t->read_file('errors.log');
unlike($errors, qr!^/ok!m, 'successful requests not logged');
my $arg = $t->read_file('arg.log');
is($arg, "/ok2 200\n/last 200\n", 'condition from a variable: empty and 0 skip');

$t->stop();
my $d = $t->testdir();
for my $case (['gzip=0', qr/invalid compression level "0"/],
	['buffer=0', qr/invalid buffer size "0"/],
	['nonsense', qr/invalid parameter "nonsense"/])
{
	$t->write_file_expand('sluice.conf', <<"EOF");
%%TEST_GLOBALS%%
events {
}
http {
    access_log $d/x.log combined $case->[0];
}
EOF
	my (undef, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/sluice.conf");
	like($err, qr/\[emerg\] $case->[1] in \S+sluice\.conf:\d+$/m, "$case->[0] refused");
}
